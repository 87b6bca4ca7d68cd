package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sync"
)

// signals is signal.NotifyContext for a stop in two steps: the first of sigs ends drain (claim
// no more, let running jobs finish), the second ends kill (kill them now). stop stops listening.
func signals(sigs ...os.Signal) (drain, kill context.Context, stop func()) {
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, sigs...)
	drain, endDrain := context.WithCancelCause(context.Background())
	kill, endKill := context.WithCancelCause(context.Background())
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for _, end := range []context.CancelCauseFunc{endDrain, endKill} {
			select {
			case s := <-ch:
				end(fmt.Errorf("%v signal received", s))
			case <-quit:
				return
			}
		}
	})
	return drain, kill, func() {
		signal.Stop(ch)
		close(quit)
		wg.Wait()
		endDrain(nil)
		endKill(nil)
	}
}
