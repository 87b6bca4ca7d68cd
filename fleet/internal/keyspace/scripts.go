package keyspace

import (
	"context"
	_ "embed"
	"time"

	"github.com/redis/go-redis/v9"
)

// The scripts, one file each under scripts/, whose header names its KEYS and ARGV.
var (
	//go:embed scripts/lease/claim.lua
	claimSrc string
	//go:embed scripts/lease/extend.lua
	extendSrc string
	//go:embed scripts/lease/reserve.lua
	reserveSrc string
	//go:embed scripts/lease/associate.lua
	associateSrc string
	//go:embed scripts/lease/settle.lua
	settleSrc string
	//go:embed scripts/lease/release.lua
	releaseSrc string
	//go:embed scripts/lease/adopt.lua
	adoptSrc string
	//go:embed scripts/lease/clear.lua
	clearSrc string
	//go:embed scripts/running/acquire.lua
	acquireSrc string
	//go:embed scripts/running/renew.lua
	renewSrc string
	//go:embed scripts/redrive/hold.lua
	holdSrc string
	//go:embed scripts/redrive/end.lua
	endSrc string

	claimScript     = redis.NewScript(claimSrc)
	extendScript    = redis.NewScript(extendSrc)
	reserveScript   = redis.NewScript(reserveSrc)
	associateScript = redis.NewScript(associateSrc)
	settleScript    = redis.NewScript(settleSrc)
	releaseScript   = redis.NewScript(releaseSrc)
	adoptScript     = redis.NewScript(adoptSrc)
	clearScript     = redis.NewScript(clearSrc)
	acquireScript   = redis.NewScript(acquireSrc)
	renewScript     = redis.NewScript(renewSrc)
	holdScript      = redis.NewScript(holdSrc)
	endScript       = redis.NewScript(endSrc)
)

// Call is one script with its keys, all of one hash slot, and its arguments, ready to run.
type Call struct {
	script *redis.Script
	keys   []string
	args   []any
}

// Run runs the call, by EVALSHA and, when the server lacks the script, by EVAL.
func (c Call) Run(ctx context.Context, r redis.Scripter) *redis.Cmd {
	return c.script.Run(ctx, r, c.keys, c.args...)
}

// EvalSha runs the call by EVALSHA only, as a pipeline must: [Call.Load] the script when the
// reply is NOSCRIPT.
func (c Call) EvalSha(ctx context.Context, r redis.Scripter) *redis.Cmd {
	return c.script.EvalSha(ctx, r, c.keys, c.args...)
}

// Load loads the call's script into r's server.
func (c Call) Load(ctx context.Context, r redis.Scripter) *redis.StringCmd {
	return c.script.Load(ctx, r)
}

func ms(d time.Duration) int64 { return d.Milliseconds() }

// job is the keys of the lease scripts but claim: the record, the lease.
func (k Keys) job(tenant, id string) []string {
	return []string{k.Record(tenant, id), k.Lease(tenant, id)}
}

// Claim takes tenant's job id's lease for owner with a new generation (claim.lua); it replies
// {mode, gen, failures, detail}.
func (k Keys) Claim(tenant, id, owner string, ttl time.Duration, deliveries uint64, queued time.Time, recordTTL, skew time.Duration, subject string) Call {
	return Call{claimScript, []string{k.Record(tenant, id), k.Lease(tenant, id), k.Epoch(Bucket(tenant, id))},
		[]any{owner, ms(ttl), deliveries, queued.UnixMilli(), ms(recordTTL), ms(skew), subject}}
}

// Extend renews generation gen's lease of tenant's job id (extend.lua); it replies 1, or 0 when lost.
func (k Keys) Extend(tenant, id string, gen int64, owner string, ttl, recordTTL time.Duration) Call {
	return Call{extendScript, k.job(tenant, id), []any{gen, owner, ms(ttl), ms(recordTTL)}}
}

// Reserve records tenant's job id's dispatch before it happens (reserve.lua); it fails FENCED when
// the caller's lease or the record moved on.
func (k Keys) Reserve(tenant, id string, gen int64, owner, payloadSHA256, profileDigest, provider string) Call {
	return Call{reserveScript, k.job(tenant, id), []any{gen, owner, payloadSHA256, profileDigest, provider}}
}

// Clear returns tenant's job id's in-doubt record to claimed once its holder proved that no earlier
// attempt passed the dispatch gate (clear.lua); it fails FENCED.
func (k Keys) Clear(tenant, id string, gen int64, owner string) Call {
	return Call{clearScript, k.job(tenant, id), []any{gen, owner}}
}

// Associate records the sandbox tenant's job id's payload enters (associate.lua); it fails FENCED.
func (k Keys) Associate(tenant, id string, gen int64, owner, sandbox string) Call {
	return Call{associateScript, k.job(tenant, id), []any{gen, owner, sandbox}}
}

// Settle records tenant's job id's settlement and ends the lease (settle.lua); it fails FENCED.
func (k Keys) Settle(tenant, id string, gen int64, owner, status string, recordTTL time.Duration) Call {
	return Call{settleScript, k.job(tenant, id), []any{gen, owner, status, ms(recordTTL)}}
}

// Release gives tenant's job id's lease up before any dispatch (release.lua); it replies the
// failure count and fails FENCED.
func (k Keys) Release(tenant, id string, gen int64, owner string, failed bool) Call {
	f := 0
	if failed {
		f = 1
	}
	return Call{releaseScript, k.job(tenant, id), []any{gen, owner, f}}
}

// Adopt records a settlement of tenant's job id whichever attempt stored it, and ends the lease of
// gen and owner when owner is not empty (adopt.lua).
func (k Keys) Adopt(tenant, id, status string, recordTTL time.Duration, gen int64, owner string) Call {
	return Call{adoptScript, k.job(tenant, id), []any{status, ms(recordTTL), gen, owner}}
}

// Acquire adds tenant's running slots for tokens, while fewer than limit are held and unexpired
// (acquire.lua); it replies how many, the first ones, it added.
func (k Keys) Acquire(tenant string, ttl time.Duration, limit int64, tokens []string) Call {
	args := make([]any, 0, 3+len(tokens))
	args = append(args, ms(ttl), limit, len(tokens))
	for _, t := range tokens {
		args = append(args, t)
	}
	return Call{acquireScript, []string{k.Running(tenant)}, args}
}

// Renew moves the expiry of tenant's slots tokens that are still held (renew.lua).
func (k Keys) Renew(tenant string, ttl time.Duration, tokens []string) Call {
	args := make([]any, 0, 1+len(tokens))
	args = append(args, ms(ttl))
	for _, t := range tokens {
		args = append(args, t)
	}
	return Call{renewScript, []string{k.Running(tenant)}, args}
}

// HoldRedrive saves run id's progress and position and renews worker's hold (hold.lua); it
// replies -1 when worker does not hold the run, else 1 when a stop was asked and 0 when not.
func (k Keys) HoldRedrive(id string, run, pos []byte, worker string, holdTTL, retention time.Duration) Call {
	return Call{holdScript, []string{k.RedriveRun(id), k.RedrivePos(id), k.RedriveHold(id), k.RedriveStop(id)},
		[]any{run, pos, worker, ms(holdTTL), ms(retention)}}
}

// EndRedrive ends run id in state, saving run, or with state empty lets go of it, while worker
// holds it (end.lua); it replies 1, or 0 when worker does not hold the run.
func (k Keys) EndRedrive(id string, run []byte, worker string, retention time.Duration, state string) Call {
	return Call{endScript, []string{k.RedriveRun(id), k.RedriveHold(id), k.RedrivesRunning()},
		[]any{run, worker, ms(retention), state, id}}
}
