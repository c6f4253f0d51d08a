package api

import (
	"context"
	"slices"

	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/identity"
	"github.com/gpuplane/gpuplane/internal/names"
	"github.com/gpuplane/gpuplane/internal/reqctx"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/tenancy"
)

// access loads what the caller in ctx may do. One query, run on every call.
func (s *API) access(ctx context.Context) (*identity.Access, error) {
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	grants, err := tenancy.GrantsOf(ctx, s.db, p.Username, p.Groups)
	if err != nil {
		return nil, err
	}
	return s.accessFrom(p, grants), nil
}

// caller is the authenticated principal of ctx (the interceptors put it
// there).
func caller(ctx context.Context) (reqctx.Principal, error) {
	p, ok := reqctx.PrincipalFrom(ctx)
	if !ok {
		return p, errs.New(errs.KindUnauthenticated, errs.ReasonUnauthenticated, "no authenticated caller")
	}
	return p, nil
}

// accessFrom is what p may do given its grants (tenancy.GrantsOf).
func (s *API) accessFrom(p reqctx.Principal, grants []tenancy.Grant) *identity.Access {
	a := &identity.Access{Principal: p, AdminOf: map[string]bool{}, Teams: map[string]identity.TeamGrant{}}
	for _, g := range p.Groups {
		if slices.Contains(s.adminGroups, g) {
			a.PlatformAdmin = true
		}
	}
	for _, gr := range grants {
		if gr.Team == "" {
			a.AdminOf[gr.Department] = true
			continue
		}
		g := a.Teams[gr.Team]
		g.Department = gr.Department
		if r := identity.ParseRole(string(gr.Role)); r > g.Role {
			g.Role = r
		}
		g.Via = append(g.Via, gr.Member)
		a.Teams[gr.Team] = g
	}
	return a
}

// readScope is what a list may return to a: everything for platform
// admins, otherwise rows of its teams and of the departments it
// administers.
func readScope(a *identity.Access) store.Scope {
	return store.Scope{All: a.PlatformAdmin, Teams: a.ReadableTeams(), Departments: a.AdminDepartments()}
}

// readableTeam returns the team when the caller may read it and NOT_FOUND
// otherwise (foreign teams look absent), together with the caller's access
// it loaded, so handlers do not load it a second time.
func (s *API) readableTeam(ctx context.Context, field, name string) (tenancy.Team, *identity.Access, error) {
	id, p, err := teamAndCaller(ctx, field, name)
	if err != nil {
		return tenancy.Team{}, nil, err
	}
	// The team and the caller's grants in one statement (one round trip).
	t, grants, err := tenancy.GetTeamWithGrants(ctx, s.db, id, p.Username, p.Groups)
	if err != nil {
		return t, nil, err
	}
	return s.teamAccess(name, t, p, grants)
}

// readableTeamWith is readableTeam with more reads (queued by more) in the
// same round trip.
func (s *API) readableTeamWith(ctx context.Context, field, name string, more func(b *store.Batch)) (tenancy.Team, *identity.Access, error) {
	id, p, err := teamAndCaller(ctx, field, name)
	if err != nil {
		return tenancy.Team{}, nil, err
	}
	var b store.Batch
	var t tenancy.Team
	var grants []tenancy.Grant
	tenancy.QueueGrantsOf(&b, &grants, p.Username, p.Groups)
	tenancy.QueueGetTeam(&b, &t, id, false)
	more(&b)
	if err := s.db.SendShared(ctx, &b); err != nil {
		return t, nil, err
	}
	return s.teamAccess(name, t, p, grants)
}

// teamAndCaller parses the team name (field, for errors) and finds the
// authenticated caller.
func teamAndCaller(ctx context.Context, field, name string) (string, reqctx.Principal, error) {
	id, err := names.ParseTeam(field, name)
	if err != nil {
		return "", reqctx.Principal{}, err
	}
	p, err := caller(ctx)
	return id, p, err
}

// teamAccess is what p may do given grants, when it may read team t.
func (s *API) teamAccess(name string, t tenancy.Team, p reqctx.Principal, grants []tenancy.Grant) (tenancy.Team, *identity.Access, error) {
	a := s.accessFrom(p, grants)
	if !a.CanReadTeam(t.ID, t.Department) {
		return tenancy.Team{}, nil, errs.NotFound(name)
	}
	return t, a, nil
}
