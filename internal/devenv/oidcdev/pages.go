package oidcdev

import (
	"encoding/json"
	"errors"
	"html/template"
	"net/http"
	"strings"

	"github.com/zitadel/oidc/v3/pkg/op"
)

// The login and device pages are plain HTML forms so they work in any
// browser and can be driven by tests with an ordinary POST (fields below).
//
//	POST /login   authRequestID, username, password
//	POST /device  user_code, username, password, action=approve|deny

var pageTmpl = template.Must(template.New("page").Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>gpuplane dev sign-in</title>
<style>
body{font-family:system-ui,sans-serif;max-width:26rem;margin:3rem auto;padding:0 1rem;color:#222}
h1{font-size:1.3rem}
.warn{background:#fff4ce;border:1px solid #e0c36a;padding:.5rem .75rem;font-size:.85rem}
.err{background:#fde2e1;border:1px solid #d9534f;padding:.5rem .75rem}
.ok{background:#e3f6e5;border:1px solid #4caf50;padding:.5rem .75rem}
label{display:block;margin-top:.8rem;font-size:.9rem}
input{width:100%;padding:.4rem;box-sizing:border-box;font-size:1rem}
button{margin-top:1rem;padding:.45rem 1rem;font-size:1rem}
</style>
</head>
<body>
<h1>{{.Title}}</h1>
<p class="warn">Development identity provider. Demo users only; the password of a demo user is its username unless configured otherwise.</p>
{{if .Error}}<p class="err" role="alert">{{.Error}}</p>{{end}}
{{if .Message}}<p class="ok" role="status">{{.Message}}</p>{{end}}
{{if .ShowForm}}
<form method="post" action="{{.Action}}">
{{if .ClientID}}<p>Signing in to <strong>{{.ClientID}}</strong>.</p>{{end}}
{{if .AuthRequestID}}<input type="hidden" name="authRequestID" value="{{.AuthRequestID}}">{{end}}
{{if .Device}}<label for="user_code">Code shown on your device</label>
<input id="user_code" name="user_code" value="{{.UserCode}}" autocomplete="off" required>{{end}}
<label for="username">Username</label>
<input id="username" name="username" value="{{.Username}}" autocomplete="username" required autofocus>
<label for="password">Password</label>
<input id="password" name="password" type="password" autocomplete="current-password">
{{if .Device}}<button type="submit" name="action" value="approve">Approve</button>
<button type="submit" name="action" value="deny" formnovalidate>Deny</button>
{{else}}<button type="submit">Sign in</button>{{end}}
</form>
{{end}}
</body>
</html>
`))

type pageData struct {
	Title         string
	Action        string
	Error         string
	Message       string
	ShowForm      bool
	Device        bool
	ClientID      string
	AuthRequestID string
	UserCode      string
	Username      string
}

func renderPage(w http.ResponseWriter, status int, d pageData) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	// The pages are never meant to be framed; this blocks clickjacking of
	// the approve button even on a dev issuer.
	w.Header().Set("X-Frame-Options", "DENY")
	// No form-action directive: browsers apply it to the redirect chain
	// after the login POST, which ends at the client's loopback callback.
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'")
	w.WriteHeader(status)
	_ = pageTmpl.Execute(w, d)
}

func parseForm(w http.ResponseWriter, r *http.Request) bool {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "malformed form", http.StatusBadRequest)
		return false
	}
	return true
}

func (i *Issuer) loginPage(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("authRequestID")
	ar, ok := i.storage.authRequestForLogin(id)
	if !ok {
		renderPage(w, http.StatusBadRequest, pageData{
			Title: "Sign-in request not found",
			Error: "This sign-in request is unknown, finished or expired. Start again from your application.",
		})
		return
	}
	renderPage(w, http.StatusOK, pageData{
		Title: "Sign in", Action: LoginPath, ShowForm: true,
		ClientID: ar.clientID, AuthRequestID: ar.id, Username: ar.loginHint,
	})
}

func (i *Issuer) loginSubmit(w http.ResponseWriter, r *http.Request) {
	if !parseForm(w, r) {
		return
	}
	id := r.PostForm.Get("authRequestID")
	username := strings.TrimSpace(r.PostForm.Get("username"))
	ar, ok := i.storage.authRequestForLogin(id)
	if !ok {
		renderPage(w, http.StatusBadRequest, pageData{
			Title: "Sign-in request not found",
			Error: "This sign-in request is unknown, finished or expired. Start again from your application.",
		})
		return
	}
	u, ok := i.storage.checkPassword(username, r.PostForm.Get("password"))
	if !ok {
		i.logf("dev OIDC issuer: failed sign-in for %q", username)
		renderPage(w, http.StatusUnauthorized, pageData{
			Title: "Sign in", Action: LoginPath, ShowForm: true,
			Error:    "Wrong username or password.",
			ClientID: ar.clientID, AuthRequestID: ar.id, Username: username,
		})
		return
	}
	if err := i.storage.completeAuthRequest(id, u.subject); err != nil {
		renderPage(w, http.StatusBadRequest, pageData{Title: "Sign-in failed", Error: err.Error()})
		return
	}
	i.logf("dev OIDC issuer: %s signed in to %s", u.Username, ar.clientID)
	callback := op.AuthCallbackURL(i.provider)(op.ContextWithIssuer(r.Context(), i.issuerURL), id)
	http.Redirect(w, r, callback, http.StatusSeeOther)
}

func (i *Issuer) devicePage(w http.ResponseWriter, r *http.Request) {
	renderPage(w, http.StatusOK, pageData{
		Title: "Sign in on a device", Action: DevicePath, ShowForm: true, Device: true,
		UserCode: r.URL.Query().Get("user_code"),
	})
}

func (i *Issuer) deviceSubmit(w http.ResponseWriter, r *http.Request) {
	if !parseForm(w, r) {
		return
	}
	userCode := strings.TrimSpace(r.PostForm.Get("user_code"))
	username := strings.TrimSpace(r.PostForm.Get("username"))
	form := pageData{
		Title: "Sign in on a device", Action: DevicePath, ShowForm: true, Device: true,
		UserCode: userCode, Username: username,
	}
	clientID, ok := i.storage.pendingDevice(userCode)
	if !ok {
		form.Error = "That code is unknown, expired or already used."
		renderPage(w, http.StatusBadRequest, form)
		return
	}
	form.ClientID = clientID
	if r.PostForm.Get("action") == "deny" {
		if err := i.storage.completeDevice(userCode, "", false); err != nil {
			form.Error = err.Error()
			renderPage(w, http.StatusBadRequest, form)
			return
		}
		renderPage(w, http.StatusOK, pageData{Title: "Request denied", Message: "The device was not signed in. You can close this window."})
		return
	}
	u, ok := i.storage.checkPassword(username, r.PostForm.Get("password"))
	if !ok {
		i.logf("dev OIDC issuer: failed device sign-in for %q", username)
		form.Error = "Wrong username or password."
		renderPage(w, http.StatusUnauthorized, form)
		return
	}
	if err := i.storage.completeDevice(userCode, u.subject, true); err != nil {
		form.Error = err.Error()
		renderPage(w, http.StatusBadRequest, form)
		return
	}
	i.logf("dev OIDC issuer: %s approved a device sign-in for %s", u.Username, clientID)
	renderPage(w, http.StatusOK, pageData{
		Title:   "Device signed in",
		Message: "Signed in as " + u.Username + ". You can return to your terminal and close this window.",
	})
}

// devToken is POST /dev/token (form: username=alice). It exists only on
// this dev issuer so that `gpuplane dev token alice` can get a token from a
// running dev server without a browser. It asks for no password by design;
// that is why the issuer must never run outside dev mode.
func (i *Issuer) devToken(w http.ResponseWriter, r *http.Request) {
	if !parseForm(w, r) {
		return
	}
	username := r.PostForm.Get("username")
	tok, ttl, err := i.mint(r.Context(), username, TokenOptions{})
	switch {
	case errors.Is(err, ErrUnknownUser):
		writeJSON(w, http.StatusNotFound, map[string]string{
			"error": "unknown_user", "error_description": "no demo user with that username",
		})
		return
	case err != nil:
		i.logf("dev OIDC issuer: minting a token for %q failed: %v", username, err)
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "server_error"})
		return
	}
	i.logf("dev OIDC issuer: minted a dev token for %s", username)
	writeJSON(w, http.StatusOK, struct {
		IDToken   string `json:"id_token"`
		ExpiresIn int64  `json:"expires_in"`
	}{tok, int64(ttl.Seconds())})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
