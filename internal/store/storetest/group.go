package storetest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gpuplane/gpuplane/internal/store"
)

// LineUp runs calls, each a change of key on db (store.DB.InGroupTx), in
// one batch: it holds a change of key open (blocker is what that change
// does, nil for nothing), queues calls behind it in the order given, then
// lets them run, and returns what each call returned. A failing blocker
// fails the test.
func LineUp(t testing.TB, ctx context.Context, db *store.DB, key string, blocker func(context.Context, *store.Tx) error, calls ...func() error) []error {
	t.Helper()
	running, hold := make(chan struct{}), make(chan struct{})
	blocked := make(chan error, 1)
	go func() {
		blocked <- db.InGroupTx(ctx, key, func(ctx context.Context, tx *store.Tx) error {
			close(running)
			<-hold
			if blocker == nil {
				return nil
			}
			return blocker(ctx, tx)
		})
	}()
	<-running
	results := make([]error, len(calls))
	var wg sync.WaitGroup
	for i, call := range calls {
		WaitGroupPending(t, db, key, i)
		wg.Go(func() { results[i] = call() })
	}
	WaitGroupPending(t, db, key, len(calls))
	close(hold)
	wg.Wait()
	if err := <-blocked; err != nil {
		t.Fatalf("the change holding %s open: %v", key, err)
	}
	return results
}

// WaitGroupPending waits until n changes of key wait for the next batch.
func WaitGroupPending(t testing.TB, db *store.DB, key string, n int) {
	t.Helper()
	for range 2000 {
		if db.GroupPending(key) >= n {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("only %d changes queued for %s, want %d", db.GroupPending(key), key, n)
}
