package main

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"
)

// TestSignalsInTwoSteps: the first signal ends drain only, the second kill too.
func TestSignalsInTwoSteps(t *testing.T) {
	drain, kill, stop := signals(syscall.SIGUSR1)
	defer stop()
	send := func() {
		if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
			t.Fatal(err)
		}
	}
	send()
	waitDone(t, drain, "drain after the first signal")
	if kill.Err() != nil {
		t.Fatal("kill ended by the first signal")
	}
	if got, want := context.Cause(drain).Error(), "user defined signal 1 signal received"; got != want {
		t.Errorf("Cause(drain) = %q, want %q", got, want)
	}
	send()
	waitDone(t, kill, "kill after the second signal")
}

func waitDone(t *testing.T, ctx context.Context, what string) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: not ended within 10s", what)
	}
}
