package runfleet_test

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"

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
