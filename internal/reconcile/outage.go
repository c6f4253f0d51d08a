package reconcile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/gpuplane/gpuplane/internal/store"
	vcs "github.com/gpuplane/gpuplane/internal/virtualcluster"
)

// hostUnreachable tells an outage of the host cluster's API server (no
// connection, connection lost, the server saying it is unavailable) from a
// failure of this virtual cluster's change. An outage is nobody's fault
// and says nothing about the change: it must not use up the attempts that
// end in FAILED. Decided by error types, never by message text.
func hostUnreachable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var opErr *net.OpError
	var dnsErr *net.DNSError
	switch {
	case errors.As(err, &opErr), errors.As(err, &dnsErr),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		return true
	}
	return apierrors.IsServiceUnavailable(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) ||
		apierrors.IsTooManyRequests(err)
}

// hostOutage records that the host cluster cannot be reached: a virtual
// cluster that may be DEGRADED becomes so (once, with an audit event),
// saying why; the caller retries with backoff, and the next reconcile that
// reaches the host moves it on (PROVISIONING or READY).
func (w *Worker) hostOutage(ctx context.Context, c claim, cause error) error {
	d, err := load(ctx, w.DB, c.VirtualCluster)
	if err != nil {
		return err
	}
	return w.DB.InTx(ctx, store.TxOptions{}, func(ctx context.Context, tx *store.Tx) error {
		cur, err := vcs.Get(ctx, tx, d.vc.ID, true)
		if err != nil {
			return err
		}
		if cur.Phase == vcs.PhaseDegraded || !cur.Phase.CanMoveTo(vcs.PhaseDegraded) {
			return nil
		}
		msg := fmt.Sprintf("degraded: host cluster unreachable, retrying with backoff: %s", oneLine(truncate(cause.Error(), 1500)))
		after, err := vcs.SetPhase(ctx, tx, cur.ID, vcs.PhaseDegraded, msg)
		if err != nil {
			return err
		}
		return w.record(ctx, tx, d, "VirtualClusterPhase"+vcs.PhaseDegraded.Word(), cur.Name(), cur.Snapshot(), after.Snapshot())
	})
}
