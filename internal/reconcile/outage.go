package reconcile

// One behaviour for a host cluster that cannot be reached, however the
// worker finds out: the observer saw it down (knownDown), connecting to it
// failed, or a step failed because it went away mid-reconcile (including
// the guardrail wait, which stops at once when its probes no longer reach
// the API server). The virtual cluster becomes DEGRADED with a neutral
// reason (hostDown), is retried without using up the attempts that end in
// FAILED, and converges once the host cluster answers again.

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/gpuplane/gpuplane/internal/fleet"
	"github.com/gpuplane/gpuplane/internal/hostcluster"
)

// hostClusterDown reports whether err says the host cluster cannot be
// reached (or its kubeconfig cannot be used, or its API server refuses
// everyone for load), rather than that one virtual cluster's change
// failed. An outage is nobody's fault and says nothing about the change.
// Decided by error types, never by message text.
func hostClusterDown(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var kerr *hostcluster.KubeconfigError
	return hostcluster.Unreachable(err) || errors.As(err, &kerr) ||
		errors.Is(err, syscall.EPIPE) || apierrors.IsTooManyRequests(err)
}

// hostDownMessage is what a virtual cluster's status, its
// HostClusterReachable condition and its audit snapshots say while its
// host cluster is down. Team members read all three, so it never carries
// the host cluster's error, which names how the cluster is reached (its
// kubeconfig Secret, namespace and key, its API server's address): that
// reason is kept on the HostCluster, which shows it to platform admins
// only.
func hostDownMessage(h fleet.HostCluster) string {
	since := ""
	if s := h.Status.UnreachableSince; s != nil {
		since = " since " + s.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("host cluster %s is unreachable%s; nothing changes there until it answers again (platform admins see why on the host cluster)",
		h.Name(), since)
}
