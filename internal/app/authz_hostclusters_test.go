package app_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/fleet"
	"github.com/gpuplane/gpuplane/internal/hostcluster"
	"github.com/gpuplane/gpuplane/internal/store"
)

// Host clusters are platform-wide: every authenticated caller reads them
// (placement names them and their labels), platform admins alone manage
// them and see how each is reached. Managing calls are refused to anyone
// else before the name is looked at, so a refusal does not tell whether a
// host cluster exists.
//
// Both matrix worlds have, beside the built-in default, hostClusters/remote:
// reached through a kubeconfig Secret that is missing, as the worker
// observed it (its status says so).
const (
	hostRemote       = "hostClusters/remote"
	hostMissing      = "hostClusters/no-such-cluster"
	hostSecretName   = "remote-kubeconfig-7f3a"
	hostSecretKey    = "value-9c1e"
	hostSecretNSpace = "gpuplane-system"
)

func (w *authzWorld) hostClusters() pb.HostClusterServiceClient {
	return pb.NewHostClusterServiceClient(w.e.Conn)
}

// addHostCluster registers hostClusters/remote and records what the worker
// would observe of it: its kubeconfig Secret is not there (the text is the
// host-cluster registry's own error).
func (w *authzWorld) addHostCluster(t *testing.T) {
	t.Helper()
	apiCall(w.hostClusters().CreateHostCluster(w.e.As(t, "alice"), &pb.CreateHostClusterRequest{
		HostClusterId: "remote",
		HostCluster: &pb.HostCluster{DisplayName: "Remote", Tiers: []pb.IsolationTier{pb.IsolationTier_SHARED},
			Labels:     map[string]string{"region": "us-east"},
			Connection: &pb.HostCluster_KubeconfigSecret{KubeconfigSecret: &pb.SecretReference{Name: hostSecretName, Key: hostSecretKey}}},
	})).must(t)
	problem := (&hostcluster.KubeconfigError{
		Target: hostcluster.Target{ID: "remote", SecretName: hostSecretName, SecretKey: hostSecretKey},
		Detail: "Secret " + hostSecretNSpace + "/" + hostSecretName + " not found",
	}).Error()
	err := w.e.App.DB().InTx(context.Background(), store.TxOptions{}, func(ctx context.Context, tx *store.Tx) error {
		_, err := fleet.RecordObservation(ctx, tx, "remote", fleet.Observation{Problem: problem})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// hostClusterShown checks what a caller is shown of a host cluster: a
// platform admin how it is reached, anyone else nothing that names the
// kubeconfig Secret, anywhere in the message.
func hostClusterShown(t *testing.T, h *pb.HostCluster, admin bool) {
	t.Helper()
	if h.GetName() != hostRemote {
		if h.GetInCluster() == nil {
			t.Errorf("%s: connection %v, want in_cluster", h.GetName(), h.GetConnection())
		}
		return
	}
	if admin {
		if ref := h.GetKubeconfigSecret(); ref.GetName() != hostSecretName || ref.GetKey() != hostSecretKey {
			t.Errorf("a platform admin reads %s without its kubeconfig Secret: %v", h.GetName(), h.GetConnection())
		}
		if !strings.Contains(h.GetStatus().GetMessage(), hostSecretName) {
			t.Errorf("a platform admin is not told which Secret is missing: %q", h.GetStatus().GetMessage())
		}
		return
	}
	if h.GetConnection() != nil {
		t.Errorf("a caller who is not a platform admin reads how %s is reached: %v", h.GetName(), h.GetConnection())
	}
	if h.GetStatus().GetReachable() || h.GetStatus().GetUnreachableSince() == nil {
		t.Errorf("%s does not read as unreachable: %v", h.GetName(), h.GetStatus())
	}
	if s := h.String(); strings.Contains(s, hostSecretName) || strings.Contains(s, hostSecretKey) {
		t.Errorf("a caller who is not a platform admin reads the kubeconfig Secret of %s: %s", h.GetName(), s)
	}
}

func isPlatformAdmin(ctx context.Context, t *testing.T, w *authzWorld) bool {
	t.Helper()
	return apiCall(w.e.Identity.GetCurrentUser(ctx, &pb.GetCurrentUserRequest{})).must(t).GetPlatformAdmin()
}

func hostClusterMatrixRows() []authzRow {
	getHost := func(t *testing.T, w *authzWorld, ctx context.Context, obj string, _ codes.Code) error {
		h, err := w.hostClusters().GetHostCluster(ctx, &pb.GetHostClusterRequest{Name: obj})
		if err == nil {
			hostClusterShown(t, h, isPlatformAdmin(ctx, t, w))
		}
		return err
	}
	listHosts := func(t *testing.T, w *authzWorld, ctx context.Context, _ string, _ codes.Code) error {
		resp, err := w.hostClusters().ListHostClusters(ctx, &pb.ListHostClustersRequest{})
		if err != nil {
			return err
		}
		admin := isPlatformAdmin(ctx, t, w)
		var got []string
		for _, h := range resp.GetHostClusters() {
			got = append(got, h.GetName())
			hostClusterShown(t, h, admin)
		}
		if want := "hostClusters/default " + hostRemote; strings.Join(got, " ") != want {
			t.Errorf("lists host clusters %v, want %s", got, want)
		}
		// Nor does the audit log show a host cluster (with its Secret) to
		// anyone but platform admins.
		evs := apiCall(w.e.Audit.ListAuditEvents(ctx, &pb.ListAuditEventsRequest{Filter: `resource = "hostClusters/*"`})).must(t)
		if n := len(evs.GetAuditEvents()); (n > 0) != admin {
			t.Errorf("reads %d audit events of host clusters (platform admin: %v)", n, admin)
		}
		return nil
	}
	createHost := func(t *testing.T, w *authzWorld, ctx context.Context, _ string, want codes.Code) error {
		id := w.uniq("host")
		_, err := w.hostClusters().CreateHostCluster(ctx, &pb.CreateHostClusterRequest{HostClusterId: id, HostCluster: &pb.HostCluster{
			Tiers: []pb.IsolationTier{pb.IsolationTier_SHARED}, Cordoned: true,
			Connection: &pb.HostCluster_KubeconfigSecret{KubeconfigSecret: &pb.SecretReference{Name: id, Key: "config"}}}})
		if err != nil {
			if _, gerr := w.hostClusters().GetHostCluster(w.e.As(t, "alice"), &pb.GetHostClusterRequest{Name: "hostClusters/" + id}); gerr == nil {
				t.Errorf("a refused create made hostClusters/%s", id)
			}
		}
		return err
	}
	updateHost := func(t *testing.T, w *authzWorld, ctx context.Context, obj string, _ codes.Code) error {
		_, err := w.hostClusters().UpdateHostCluster(ctx, &pb.UpdateHostClusterRequest{
			HostCluster: &pb.HostCluster{Name: obj, Cordoned: true, Labels: map[string]string{"moved": "by-matrix"}},
			UpdateMask:  apiMask("cordoned", "labels"),
		})
		if err == nil && obj == hostRemote {
			// Put it back, so every caller meets the same host cluster.
			apiCall(w.hostClusters().UpdateHostCluster(w.e.As(t, "alice"), &pb.UpdateHostClusterRequest{
				HostCluster: &pb.HostCluster{Name: obj, Labels: map[string]string{"region": "us-east"}},
				UpdateMask:  apiMask("cordoned", "labels"),
			})).must(t)
		} else if err != nil && obj == hostRemote {
			h := apiCall(w.hostClusters().GetHostCluster(w.e.As(t, "alice"), &pb.GetHostClusterRequest{Name: obj})).must(t)
			if h.GetCordoned() || h.GetLabels()["moved"] != "" {
				t.Errorf("a refused update changed %s: %v", obj, h)
			}
		}
		return err
	}
	deleteHost := func(t *testing.T, w *authzWorld, ctx context.Context, obj string, _ codes.Code) error {
		if obj == "" {
			// A host cluster of its own, hosting nothing, for each call.
			id := w.uniq("doomed")
			obj = apiCall(w.hostClusters().CreateHostCluster(w.e.As(t, "alice"), &pb.CreateHostClusterRequest{HostClusterId: id,
				HostCluster: &pb.HostCluster{Tiers: []pb.IsolationTier{pb.IsolationTier_SHARED}, Cordoned: true,
					Connection: &pb.HostCluster_KubeconfigSecret{KubeconfigSecret: &pb.SecretReference{Name: id, Key: "config"}}}})).must(t).GetName()
		}
		_, err := w.hostClusters().DeleteHostCluster(ctx, &pb.DeleteHostClusterRequest{Name: obj})
		if err != nil && obj != hostMissing {
			if _, gerr := w.hostClusters().GetHostCluster(w.e.As(t, "alice"), &pb.GetHostClusterRequest{Name: obj}); gerr != nil {
				t.Errorf("a refused delete removed %s: %v", obj, gerr)
			}
		}
		return err
	}
	return []authzRow{
		//                                                       alice frank bob carol dan erin nobody
		{"HostClusterService.GetHostCluster", hostRemote, "OK OK OK OK OK OK OK", getHost},
		{"HostClusterService.GetHostCluster", "hostClusters/default", "OK OK OK OK OK OK OK", getHost},
		{"HostClusterService.GetHostCluster", hostMissing, "NF NF NF NF NF NF NF", getHost},
		{"HostClusterService.ListHostClusters", "", "OK OK OK OK OK OK OK", listHosts},
		{"HostClusterService.CreateHostCluster", "", "OK PD PD PD PD PD PD", createHost},
		{"HostClusterService.UpdateHostCluster", hostRemote, "OK PD PD PD PD PD PD", updateHost},
		{"HostClusterService.UpdateHostCluster", hostMissing, "NF PD PD PD PD PD PD", updateHost},
		{"HostClusterService.DeleteHostCluster", "", "OK PD PD PD PD PD PD", deleteHost},
		{"HostClusterService.DeleteHostCluster", hostMissing, "NF PD PD PD PD PD PD", deleteHost},
	}
}
