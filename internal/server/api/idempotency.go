package api

import (
	"context"
	"crypto/sha256"
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/store"
)

// create runs a create in one transaction (of group, when not empty:
// store.DB.InGroupTx; see tenancy.DepartmentGroup), idempotently: unless (caller,
// method, requestID) was seen before, create runs inside the transaction
// and its answer is stored with the change; a retry with the same key
// replays the stored answer and writes nothing; the same key with a
// different request is refused. Concurrent retries of one key serialise on
// an advisory lock, so the second waits for the first and then replays it.
func create[T proto.Message](ctx context.Context, db *store.DB, group, caller, method, requestID string, req proto.Message,
	newResp func() T, fn func(ctx context.Context, tx *store.Tx) (T, error)) (T, error) {
	return createAhead(ctx, db, group, nil, nil, caller, method, requestID, req, newResp, fn)
}

// createAhead is create with the change's reads made ahead by p for its
// item (store.DB.InGroupTxPrefetched; p nil: none).
func createAhead[T proto.Message](ctx context.Context, db *store.DB, group string, p *store.Prefetch, item any, caller, method, requestID string,
	req proto.Message, newResp func() T, fn func(ctx context.Context, tx *store.Tx) (T, error)) (T, error) {
	var out T
	err := inGroup(ctx, db, group, p, item, func(ctx context.Context, tx *store.Tx) error {
		var err error
		out, err = idempotent(ctx, tx, caller, method, requestID, req, newResp, func() (T, error) { return fn(ctx, tx) })
		return err
	})
	return out, err
}

func idempotent[T proto.Message](ctx context.Context, tx *store.Tx, caller, method, requestID string, req proto.Message, newResp func() T, fn func() (T, error)) (T, error) {
	var zero T
	if requestID == "" {
		return fn()
	}
	if len(requestID) > 128 || strings.ContainsRune(requestID, 0) {
		return zero, errs.InvalidField("request_id", "must be at most 128 characters, without NUL")
	}
	reqBytes, err := proto.MarshalOptions{Deterministic: true}.Marshal(req)
	if err != nil {
		return zero, err
	}
	hash := sha256.Sum256(reqBytes)
	if err := store.LockIdempotencyKey(ctx, tx, caller+"|"+method+"|"+requestID); err != nil {
		return zero, err
	}
	storedHash, stored, found, err := store.StoredResponse(ctx, tx, caller, method, requestID)
	if err != nil {
		return zero, err
	}
	if found {
		if string(storedHash) != string(hash[:]) {
			return zero, errs.New(errs.KindInvalidArgument, errs.ReasonRequestIDReused,
				"request_id %q was already used for a different request", requestID).With("request_id", requestID)
		}
		resp := newResp()
		if err := proto.Unmarshal(stored, resp); err != nil {
			return zero, fmt.Errorf("replay stored response: %w", err)
		}
		return resp, nil
	}
	resp, err := fn()
	if err != nil {
		return zero, err
	}
	out, err := proto.Marshal(resp)
	if err != nil {
		return zero, err
	}
	return resp, store.StoreResponse(ctx, tx, caller, method, requestID, hash[:], out)
}

// mutate runs fn in one transaction (of group, as for create) and returns
// its answer (updates and deletes: no request_id).
func mutate[T any](ctx context.Context, db *store.DB, group string, fn func(ctx context.Context, tx *store.Tx) (T, error)) (T, error) {
	return mutateAhead(ctx, db, group, nil, nil, fn)
}

// mutateAhead is mutate with reads made ahead, as for createAhead.
func mutateAhead[T any](ctx context.Context, db *store.DB, group string, p *store.Prefetch, item any, fn func(ctx context.Context, tx *store.Tx) (T, error)) (T, error) {
	var out T
	err := inGroup(ctx, db, group, p, item, func(ctx context.Context, tx *store.Tx) error {
		var err error
		out, err = fn(ctx, tx)
		return err
	})
	return out, err
}

// inGroup is store.DB.InGroupTx, or InGroupTxPrefetched when p is set.
func inGroup(ctx context.Context, db *store.DB, group string, p *store.Prefetch, item any, fn func(ctx context.Context, tx *store.Tx) error) error {
	if p == nil {
		return db.InGroupTx(ctx, group, fn)
	}
	return db.InGroupTxPrefetched(ctx, group, p, item, fn)
}
