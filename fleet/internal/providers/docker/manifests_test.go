package docker_test

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/runfleet/runfleet/fleet/internal/profile"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
)

// TestManifestsShippedInImage: the manifests an image carries in profile.ShippedDir are read
// from it (its *.json files only); an image without the directory ships none, without error.
func TestManifestsShippedInImage(t *testing.T) {
	p, _ := newProvider(t)
	ctx := t.Context()
	if files, err := p.Manifests(ctx, testenv.Image(), profile.ShippedDir); err != nil || files != nil {
		t.Fatalf("Manifests(sandbox image) = %v, %v; want none", files, err)
	}

	ref := imageWith(t, "runfleet-test-manifests:"+fleet, map[string]string{"usr/share/runfleet/langs/sh.json": `{"name":"sh"}`,
		"usr/share/runfleet/langs/README": "not a manifest", "usr/share/runfleet/langs/old/x.json": "{}"})
	files, err := p.Manifests(ctx, ref, profile.ShippedDir)
	if err != nil || len(files) != 1 || string(files["sh.json"]) != `{"name":"sh"}` {
		t.Fatalf("Manifests(image with %s) = %q, %v; want sh.json alone", profile.ShippedDir, files, err)
	}
}

// TestManifestsBounded: an image holding more manifests than any language set needs (each one
// within the per-file bound) is refused instead of read whole into the worker's memory.
func TestManifestsBounded(t *testing.T) {
	p, _ := newProvider(t)
	files := map[string]string{}
	big := `{"name":"x"}` + strings.Repeat(" ", 1<<20-20)
	for i := range 5 {
		files[fmt.Sprintf("usr/share/runfleet/langs/l%d.json", i)] = big
	}
	ref := imageWith(t, "runfleet-test-manifests-big:"+fleet, files)
	if got, err := p.Manifests(t.Context(), ref, profile.ShippedDir); err == nil {
		t.Fatalf("Manifests(image with 5 MiB of manifests) = %d files, nil; want an error", len(got))
	}
}

// imageWith commits as ref an image of testenv.Image() with files (path → content) added, removed when t ends.
func imageWith(t *testing.T, ref string, files map[string]string) string {
	t.Helper()
	ctx := t.Context()
	c, err := client.New(client.FromEnv)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	made, err := c.ContainerCreate(ctx, client.ContainerCreateOptions{Config: &container.Config{Image: testenv.Image(), Entrypoint: []string{"/nonexistent"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.ContainerRemove(context.WithoutCancel(ctx), made.ID, client.ContainerRemoveOptions{Force: true})
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, body := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(body))
	}
	tw.Close()
	if _, err := c.CopyToContainer(ctx, made.ID, client.CopyToContainerOptions{DestinationPath: "/", Content: &buf}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ContainerCommit(ctx, made.ID, client.ContainerCommitOptions{Reference: ref}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		rc, err := client.New(client.FromEnv)
		if err != nil {
			return
		}
		defer rc.Close()
		_, _ = rc.ImageRemove(context.Background(), ref, client.ImageRemoveOptions{Force: true})
	})
	return ref
}
