// Package tenancy owns departments, teams and members, the quota hierarchy
// checks between them, and loading what a caller may do.
package tenancy

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/identity"
	"github.com/gpuplane/gpuplane/internal/names"
	"github.com/gpuplane/gpuplane/internal/quota"
	"github.com/gpuplane/gpuplane/internal/store"
)

// CapacitySource says how much the host cluster has. The worker fills it
// from real nodes; until then a static configuration does.
type CapacitySource interface {
	Capacity(ctx context.Context) (quota.Resources, error)
}

// StaticCapacity is a fixed capacity from configuration.
type StaticCapacity quota.Resources

func (s StaticCapacity) Capacity(context.Context) (quota.Resources, error) {
	return quota.Resources(s), nil
}

// Service implements the tenancy rules on PostgreSQL.
type Service struct {
	Pool               *pgxpool.Pool
	PlatformAdminGroup []string
	Capacity           CapacitySource
	Overcommit         float64
	// CorrelationID returns the API call id for audit events.
	CorrelationID func(context.Context) string
}

// Access loads what the caller in ctx may do. One query, run on every call.
func (s *Service) Access(ctx context.Context) (*identity.Access, error) {
	p, ok := identity.PrincipalFrom(ctx)
	if !ok {
		return nil, errs.New(errs.KindUnauthenticated, errs.ReasonUnauthenticated, "no authenticated caller")
	}
	a := &identity.Access{Principal: p, AdminOf: map[string]bool{}, Teams: map[string]identity.TeamGrant{}}
	for _, g := range p.Groups {
		if slices.Contains(s.PlatformAdminGroup, g) {
			a.PlatformAdmin = true
		}
	}
	groups := p.Groups
	if groups == nil {
		groups = []string{}
	}
	rows, err := s.Pool.Query(ctx, `
		SELECT 'team', m.team_id, t.department_id, m.role, m.id
		  FROM members m JOIN teams t ON t.id = m.team_id
		 WHERE (m.principal_kind = 'user' AND m.principal = $1)
		    OR (m.principal_kind = 'group' AND m.principal = ANY($2))
		UNION ALL
		SELECT 'department', '', d.id, '', ''
		  FROM departments d
		 WHERE d.admin_groups && $2`, p.Username, groups)
	if err != nil {
		return nil, store.Classify(err)
	}
	defer rows.Close()
	for rows.Next() {
		var kind, team, dept, role, member string
		if err := rows.Scan(&kind, &team, &dept, &role, &member); err != nil {
			return nil, err
		}
		if kind == "department" {
			a.AdminOf[dept] = true
			continue
		}
		g := a.Teams[team]
		g.Department = dept
		if r := identity.ParseRole(role); r > g.Role {
			g.Role = r
		}
		g.Via = append(g.Via, member)
		a.Teams[team] = g
	}
	return a, rows.Err()
}

func (s *Service) correlationID(ctx context.Context) string {
	if s.CorrelationID == nil {
		return ""
	}
	return s.CorrelationID(ctx)
}

// decodeIDCursor reads a page token whose cursor is the last listed id.
// Tokens are not signed, so a cursor that is not an id is refused here
// instead of reaching SQL (a NUL byte fails the query: INTERNAL).
func decodeIDCursor(token, scope string) (string, error) {
	var after string
	if err := store.DecodePageToken(token, scope, &after); err != nil {
		return "", err
	}
	if token != "" && names.CheckID(after) != "" {
		e := errs.New(errs.KindInvalidArgument, errs.ReasonInvalidPageToken, "invalid page token")
		e.Violations = []errs.FieldViolation{{Field: "page_token", Description: "the page token is malformed"}}
		return "", e
	}
	return after, nil
}

// Etag is derived from the row version and update time, so a resource that
// was deleted and created again under the same name gets new etags.
func Etag(version int64, updated time.Time) string {
	return strconv.FormatInt(version, 10) + "-" + strconv.FormatInt(updated.UnixMicro(), 36)
}

// CheckEtag returns ABORTED when want is set and differs from current.
func CheckEtag(resource, want, current string) error {
	if want != "" && want != current {
		return errs.EtagMismatch(resource)
	}
	return nil
}

func ts(t time.Time) *timestamppb.Timestamp { return timestamppb.New(t) }

// Idempotent runs create inside tx unless (caller, method, requestID) was
// seen before, in which case the stored response is returned and nothing is
// written. The advisory lock serialises concurrent retries of one key, so
// the second one waits for the first and then replays its answer.
func Idempotent[T proto.Message](ctx context.Context, tx pgx.Tx, caller, method, requestID string, req proto.Message, newResp func() T, create func() (T, error)) (T, error) {
	var zero T
	if requestID == "" {
		return create()
	}
	if len(requestID) > 128 || strings.ContainsRune(requestID, 0) {
		return zero, errs.InvalidField("request_id", "must be at most 128 characters, without NUL")
	}
	reqBytes, err := proto.MarshalOptions{Deterministic: true}.Marshal(req)
	if err != nil {
		return zero, err
	}
	hash := sha256.Sum256(reqBytes)
	key := caller + "|" + method + "|" + requestID
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, key); err != nil {
		return zero, err
	}
	var storedHash, stored []byte
	err = tx.QueryRow(ctx, `SELECT request_hash, response FROM idempotency_keys
		WHERE caller = $1 AND method = $2 AND request_id = $3`, caller, method, requestID).Scan(&storedHash, &stored)
	switch {
	case err == nil:
		if string(storedHash) != string(hash[:]) {
			return zero, errs.New(errs.KindInvalidArgument, errs.ReasonRequestIDReused,
				"request_id %q was already used for a different request", requestID).With("request_id", requestID)
		}
		resp := newResp()
		if err := proto.Unmarshal(stored, resp); err != nil {
			return zero, fmt.Errorf("replay stored response: %w", err)
		}
		return resp, nil
	case !errors.Is(err, pgx.ErrNoRows):
		return zero, err
	}
	resp, err := create()
	if err != nil {
		return zero, err
	}
	out, err := proto.Marshal(resp)
	if err != nil {
		return zero, err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO idempotency_keys (caller, method, request_id, request_hash, response)
		VALUES ($1, $2, $3, $4, $5)`, caller, method, requestID, hash[:], out); err != nil {
		return zero, err
	}
	return resp, nil
}
