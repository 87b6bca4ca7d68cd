package docker_test

import (
	"archive/tar"
	"bytes"
	"testing"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/runfleet/runfleet/fleet/internal/profile"
)

// TestManifestsShippedInImage: the manifests an image carries in profile.ShippedDir are read
// from it (its *.json files only); an image without the directory ships none, without error.
func TestManifestsShippedInImage(t *testing.T) {
	p, _ := newProvider(t)
	ctx := t.Context()
	if files, err := p.Manifests(ctx, image(), profile.ShippedDir); err != nil || files != nil {
		t.Fatalf("Manifests(sandbox image) = %v, %v; want none", files, err)
	}

	c, err := client.New(client.FromEnv)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	made, err := c.ContainerCreate(ctx, client.ContainerCreateOptions{Config: &container.Config{Image: image(), Entrypoint: []string{"/nonexistent"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.ContainerRemove(ctx, made.ID, client.ContainerRemoveOptions{Force: true})
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, body := range map[string]string{"usr/share/runfleet/langs/sh.json": `{"name":"sh"}`, "usr/share/runfleet/langs/README": "not a manifest",
		"usr/share/runfleet/langs/old/x.json": "{}"} {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(body))
	}
	tw.Close()
	if _, err := c.CopyToContainer(ctx, made.ID, client.CopyToContainerOptions{DestinationPath: "/", Content: &buf}); err != nil {
		t.Fatal(err)
	}
	ref := "runfleet-test-manifests:" + fleet
	if _, err := c.ContainerCommit(ctx, made.ID, client.ContainerCommitOptions{Reference: ref}); err != nil {
		t.Fatal(err)
	}
	defer c.ImageRemove(ctx, ref, client.ImageRemoveOptions{Force: true})

	files, err := p.Manifests(ctx, ref, profile.ShippedDir)
	if err != nil || len(files) != 1 || string(files["sh.json"]) != `{"name":"sh"}` {
		t.Fatalf("Manifests(image with %s) = %q, %v; want sh.json alone", profile.ShippedDir, files, err)
	}
}
