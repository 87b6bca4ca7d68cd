package runfleet_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/nats-io/nats.go"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/job"
)

// A job names the files it produces as outputs; once it settled, the settlement lists them and
// the client reads them from the fleet's object store.
func ExampleClient_OpenArtifact() {
	nc, err := nats.Connect(cmp.Or(os.Getenv("NATS_URL"), nats.DefaultURL))
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	ctx := context.Background()
	c, err := runfleet.NewClient(ctx, nc, runfleet.Options{})
	if err != nil {
		panic(err)
	}
	st, err := c.Run(ctx, "default", job.Request{Language: "python3", Outputs: []string{"out/*.csv"},
		Code: "import os\nos.makedirs('out')\nopen('out/squares.csv', 'w').write(''.join(f'{i},{i*i}\\n' for i in range(4)))\nopen('scratch.txt', 'w').write('not kept')"}, nil)
	if err != nil {
		panic(err)
	}
	for _, a := range st.Artifacts {
		fmt.Println(a.Path, a.Size, "bytes, sha256", a.SHA256[:12])
	}
	r, err := c.OpenArtifact(ctx, st.JobID, "out/squares.csv")
	if err != nil {
		panic(err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		panic(err)
	}
	fmt.Print(string(b))
	// Output:
	// out/squares.csv 16 bytes, sha256 f3d736ab2bbd
	// 0,0
	// 1,1
	// 2,4
	// 3,9
}

// SaveArtifacts downloads every file a job kept into a directory of the caller's: the names are
// the job's choice, so the writes stay inside it and an existing file is never replaced.
func ExampleClient_SaveArtifacts() {
	nc, err := nats.Connect(cmp.Or(os.Getenv("NATS_URL"), nats.DefaultURL))
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	ctx := context.Background()
	c, err := runfleet.NewClient(ctx, nc, runfleet.Options{})
	if err != nil {
		panic(err)
	}
	st, err := c.Run(ctx, "default", job.Request{Language: "python3", Outputs: []string{"**"},
		Code: "import os\nos.makedirs('.git')\nopen('.git/config', 'w').write('[core]\\n\\tfsmonitor = touch /tmp/owned\\n')\nopen('report.txt', 'w').write('done')"}, nil)
	if err != nil {
		panic(err)
	}
	dir, err := os.MkdirTemp("", "artifacts-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	_, err = c.SaveArtifacts(ctx, st.JobID, filepath.Join(dir, st.JobID), nil)
	fmt.Println(errors.Is(err, runfleet.ErrUnsafeArtifactPath))

	st, err = c.Run(ctx, "default", job.Request{Language: "python3", Outputs: []string{"*.txt"},
		Code: "open('report.txt', 'w').write('done')"}, nil)
	if err != nil {
		panic(err)
	}
	_, err = c.SaveArtifacts(ctx, st.JobID, dir, &runfleet.SaveOptions{OnSave: func(a job.Artifact) { fmt.Printf("saved %q\n", a.Path) }})
	fmt.Println(err)
	_, err = c.SaveArtifacts(ctx, st.JobID, dir, nil)
	fmt.Println(errors.Is(err, runfleet.ErrArtifactExists))
	// Output:
	// true
	// saved "report.txt"
	// <nil>
	// true
}
