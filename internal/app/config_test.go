package app_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/gpuplane/gpuplane/internal/app"
)

// TestPrintRedactsEveryDSNForm: the configuration printed at start never
// shows a database password, whichever form the DSN takes (the forms
// themselves are covered by store's TestRedactDSN).
func TestPrintRedactsEveryDSNForm(t *testing.T) {
	for dsn, secret := range map[string]string{
		"postgres://app:Url-S3cret@db:5432/gpuplane":                    "Url-S3cret",
		"postgres://app@db/gpuplane?sslmode=require&password=Qu3ry-pw":  "Qu3ry-pw",
		"host=db port=5432 user=app password=Kv-S3cret dbname=gpuplane": "Kv-S3cret",
		"host=db password = 'with spaces' dbname=gpuplane":              "with spaces",
		`host=db password='it\'s here' dbname=gpuplane`:                 "s here",
	} {
		cfg := app.Defaults()
		cfg.DatabaseURL = dsn
		var out bytes.Buffer
		cfg.Print(&out)
		if strings.Contains(out.String(), secret) {
			t.Errorf("printed configuration shows the password of %q:\n%s", dsn, out.String())
		}
		if !strings.Contains(out.String(), "host=db") && !strings.Contains(out.String(), "@db") {
			t.Errorf("printed configuration lost the database host of %q:\n%s", dsn, out.String())
		}
	}
}
