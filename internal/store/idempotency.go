package store

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
)

// The idempotency_keys table: one row per (caller, method, request_id) of
// a create that carried a request_id, with a hash of the request and the
// response to replay. internal/server/api decides what is hashed and
// replayed; this is the table's only SQL.

// LockIdempotencyKey serialises concurrent retries of one key until tx ends:
// the second waits for the first and then finds its stored answer.
func LockIdempotencyKey(ctx context.Context, tx *Tx, key string) error {
	_, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, key)
	return err
}

// StoredResponse returns the request hash and response stored for a key;
// found is false when the key is new.
func StoredResponse(ctx context.Context, tx *Tx, caller, method, requestID string) (hash, response []byte, found bool, err error) {
	err = tx.QueryRow(ctx, `SELECT request_hash, response FROM idempotency_keys
		WHERE caller = $1 AND method = $2 AND request_id = $3`, caller, method, requestID).Scan(&hash, &response)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil, false, nil
	}
	return hash, response, err == nil, err
}

// StoreResponse records the answer to a key, in the transaction that made
// the change, so both commit or neither.
func StoreResponse(ctx context.Context, tx *Tx, caller, method, requestID string, hash, response []byte) error {
	// Sent with COMMIT: the key's advisory lock (LockIdempotencyKey) keeps
	// another call with the same key from racing this insert.
	tx.ExecDeferred(`INSERT INTO idempotency_keys (caller, method, request_id, request_hash, response)
		VALUES ($1, $2, $3, $4, $5)`, caller, method, requestID, hash, response)
	return nil
}
