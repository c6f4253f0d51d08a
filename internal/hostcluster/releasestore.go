package hostcluster

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	helmrelease "helm.sh/helm/v4/pkg/release"
	releasev1 "helm.sh/helm/v4/pkg/release/v1"
	"helm.sh/helm/v4/pkg/storage/driver"
)

// releaseSecrets is Helm's Secrets storage driver with a cheaper encoding
// on write. Helm gzips every release record (the whole chart, its values and
// the rendered manifest, several hundred KB of JSON) at gzip's best
// compression, twice per install (pending, then deployed): that was a
// quarter of the worker's CPU when provisioning. Records written here are in
// exactly Helm's format (a Secret of type helm.sh/release.v1 named by the
// release key, with Helm's labels and the release as base64 of gzipped JSON
// under "release"), only compressed at gzip's fastest level, which any
// gzip reader (Helm's, `helm` on the command line) reads the same way; the
// records are somewhat larger. Reads, deletes and queries are Helm's own.
type releaseSecrets struct {
	*driver.Secrets
	impl corev1client.SecretInterface
	// wrote is told of every record written (the Client's watch of release
	// records then waits for it: Client.wrote).
	wrote func(*corev1.Secret)
}

func newReleaseSecrets(impl corev1client.SecretInterface, wrote func(*corev1.Secret)) *releaseSecrets {
	return &releaseSecrets{Secrets: driver.NewSecrets(impl), impl: impl, wrote: wrote}
}

// Create stores a new record; ErrReleaseExists when the key is taken.
func (s *releaseSecrets) Create(key string, rel helmrelease.Releaser) error {
	rls, ok := rel.(*releasev1.Release)
	if !ok {
		return s.Secrets.Create(key, rel)
	}
	obj, err := releaseSecret(key, rls, "createdAt")
	if err != nil {
		return fmt.Errorf("create: failed to encode release %q: %w", rls.Name, err)
	}
	created, err := s.impl.Create(context.Background(), obj, metav1.CreateOptions{})
	if err != nil {
		if apierrors.IsAlreadyExists(err) {
			return driver.ErrReleaseExists
		}
		return fmt.Errorf("create: failed to create: %w", err)
	}
	s.wrote(created)
	return nil
}

// Update replaces an existing record.
func (s *releaseSecrets) Update(key string, rel helmrelease.Releaser) error {
	rls, ok := rel.(*releasev1.Release)
	if !ok {
		return s.Secrets.Update(key, rel)
	}
	obj, err := releaseSecret(key, rls, "modifiedAt")
	if err != nil {
		return fmt.Errorf("update: failed to encode release %q: %w", rls.Name, err)
	}
	updated, err := s.impl.Update(context.Background(), obj, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("update: failed to update: %w", err)
	}
	s.wrote(updated)
	return nil
}

// releaseSecret builds the record: the release's own labels, the time label
// of the operation (createdAt or modifiedAt, Unix seconds), then Helm's
// name, owner, status and version labels, which win over any of the same
// name.
func releaseSecret(key string, rls *releasev1.Release, timeLabel string) (*corev1.Secret, error) {
	data, err := json.Marshal(rls)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(data); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	labels := maps.Clone(rls.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[timeLabel] = strconv.FormatInt(time.Now().Unix(), 10)
	labels["name"] = rls.Name
	labels["owner"] = "helm"
	labels["status"] = rls.Info.Status.String()
	labels["version"] = strconv.Itoa(rls.Version)
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: key, Labels: labels},
		Type:       "helm.sh/release.v1",
		Data:       map[string][]byte{"release": []byte(base64.StdEncoding.EncodeToString(buf.Bytes()))},
	}, nil
}
