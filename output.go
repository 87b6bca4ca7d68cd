package runfleet

import (
	"cmp"
	"context"

	"github.com/runfleet/runfleet/job"
)

// Result is what [Client.Output] returns: the job's output by stream, and its settlement.
type Result struct {
	Stdout, Stderr []byte
	Settlement     job.Settlement
}

// Output runs req as [Client.Run] does and returns its standard output and error with the
// settlement, as exec.Cmd.Output does (o.OnPage, when set, is called too). When the job did not
// succeed it returns what it captured and the settlement beside the error, a *[JobError] around
// st.Err().
//
// The capture holds at most the job's own output bound, stdout and stderr together: the request's
// Limits.OutputBytes, or when it sets none the largest a default worker allows
// (job.DefaultPolicy().Max.OutputBytes). The worker cuts output at the same bound and says so in
// Settlement.Truncated, so the capture misses nothing of a job it ran under a default policy.
// Pages whose lifetime ended before the watch read them are missing, as for [Client.Watch].
func (c *Client) Output(ctx context.Context, queue string, req job.Request, o *RunOptions) (Result, error) {
	var ro RunOptions
	if o != nil {
		ro = *o
	}
	var res Result
	room := cmp.Or(req.Limits.OutputBytes, job.DefaultPolicy().Max.OutputBytes)
	onPage := ro.OnPage
	ro.OnPage = func(p Page) error {
		data := p.Data[:min(int64(len(p.Data)), max(room, 0))]
		switch p.Stream {
		case job.Stdout:
			res.Stdout = append(res.Stdout, data...)
			room -= int64(len(data))
		case job.Stderr:
			res.Stderr = append(res.Stderr, data...)
			room -= int64(len(data))
		}
		if onPage != nil {
			return onPage(p)
		}
		return nil
	}
	st, err := c.Run(ctx, queue, req, &ro)
	res.Settlement = st
	return res, err
}
