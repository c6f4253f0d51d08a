package approval

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/gpuplane/gpuplane/internal/policy"
	"github.com/gpuplane/gpuplane/internal/tenancy"
	"github.com/gpuplane/gpuplane/internal/vclusterversions"
)

// Service holds what requests, policies and virtual clusters share.
type Service struct {
	Tenancy *tenancy.Service
	// Versions are the vCluster chart and Kubernetes versions requests may
	// name, with the defaults for requests that name none.
	Versions vclusterversions.Catalog
	Log      *slog.Logger
	Now      func() time.Time

	// CAFetcher returns the PEM CA bundle of a virtual cluster's API server
	// (kubeconfig.go). Nil: kubeconfigs carry no CA; an error: the CA is
	// not known yet (FAILED_PRECONDITION).
	CAFetcher func(ctx context.Context, vcID string) ([]byte, error)
	// AdminKubeconfigFetcher returns the vCluster's own admin kubeconfig,
	// handed out only for break-glass access. Nil: break glass is
	// unavailable (no host cluster).
	AdminKubeconfigFetcher func(ctx context.Context, vcID string) ([]byte, error)
	// APIEndpoint is the gpuplane API address written into kubeconfigs'
	// credential plugin when the caller names none.
	APIEndpoint string

	mu       sync.Mutex
	programs map[string]compiled // policy id -> program at a version
}

type compiled struct {
	version int64
	prg     *policy.Program
}

func (s *Service) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func (s *Service) log() *slog.Logger {
	if s.Log != nil {
		return s.Log
	}
	return slog.Default()
}

// program compiles a policy once per version. The expression is compared
// too: a policy deleted and created again under the same id starts over at
// version 1 with a different expression.
func (s *Service) program(id string, version int64, expr string) (*policy.Program, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.programs[id]; ok && c.version == version && c.prg.Expression() == expr {
		return c.prg, nil
	}
	prg, err := policy.Compile(expr)
	if err != nil {
		return nil, err
	}
	if s.programs == nil {
		s.programs = map[string]compiled{}
	}
	s.programs[id] = compiled{version: version, prg: prg}
	return prg, nil
}
