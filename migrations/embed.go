// Package migrations embeds the SQL schema migrations (golang-migrate format).
package migrations

import "embed"

// FS holds NNNNNN_name.up.sql / .down.sql files at its root.
//
//go:embed *.sql
var FS embed.FS
