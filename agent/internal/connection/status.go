// Package connection records, on the leader Lease, whether the agent reaches the orchestrator,
// and reads that record back for `outpost-agent check-connection` (the chart's `helm test`).
//
// A standby replica is ready while the leader works, so no pod's readiness says whether the
// runner as a whole reaches its orchestrator; the Lease the leader already holds is the one
// object that speaks for the runner, and reading it needs nothing but `get` on that one name.
package connection

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// Annotations of the Lease that hold the record. Times are RFC 3339 in UTC.
const (
	AnnotationURL         = "outpost.dev/orchestrator-url"
	AnnotationVersion     = "outpost.dev/orchestrator-version"
	AnnotationInstance    = "outpost.dev/connection-recorded-by"
	AnnotationLastOK      = "outpost.dev/last-poll-ok-at"
	AnnotationLastError   = "outpost.dev/last-poll-error"
	AnnotationErrorKind   = "outpost.dev/last-poll-error-kind"
	AnnotationLastErrorAt = "outpost.dev/last-poll-error-at"
)

// Kinds of poll errors: what is to blame, so the check can say what to do.
const (
	// KindNetwork: no answer (DNS, connection refused, timeout, proxy).
	KindNetwork = "network"
	// KindTLS: the orchestrator's certificate is not trusted.
	KindTLS = "tls"
	// KindRefused: the orchestrator refused the signed request (401/403): the runner is not
	// registered, or its public keys do not hold the agent's key.
	KindRefused = "refused"
	// KindProtocol: the agent and the orchestrator speak no agent protocol in common.
	KindProtocol = "protocol"
	// KindAnswer: the orchestrator (or whatever answers at the URL) answered with another error.
	KindAnswer = "answer"
)

// timeLayout is RFC 3339 with milliseconds, so a success and a failure within one second stay
// in order.
const timeLayout = "2006-01-02T15:04:05.000Z07:00"

// maxErrorBytes bounds the recorded error: enough for the cause, never a whole response.
const maxErrorBytes = 300

// Status is the agent's record of its connection to the orchestrator.
type Status struct {
	// URL is the orchestrator's URL as the agent calls it (user info removed).
	URL string
	// Version is the orchestrator's release, from the last successful poll.
	Version string
	// Instance is the agent replica that recorded this (its pod name).
	Instance string
	// LastOK is the time of the last successful poll; zero when none succeeded yet.
	LastOK time.Time
	// LastError is the last poll error (one line, short), Kind what is to blame, LastErrorAt
	// when it happened; they stay after a later success, which LastOK then postdates.
	LastError   string
	Kind        string
	LastErrorAt time.Time
}

// Failing tells whether the latest poll recorded failed.
func (s Status) Failing() bool { return !s.LastErrorAt.IsZero() && !s.LastErrorAt.Before(s.LastOK) }

// annotate writes s into a Lease's annotations: what s lacks is removed, other annotations are
// left alone.
func (s Status) annotate(ann map[string]string) {
	for k, v := range map[string]string{
		AnnotationURL: s.URL, AnnotationVersion: s.Version, AnnotationInstance: s.Instance,
		AnnotationLastOK: formatTime(s.LastOK), AnnotationLastError: s.LastError, AnnotationErrorKind: s.Kind,
		AnnotationLastErrorAt: formatTime(s.LastErrorAt),
	} {
		if v == "" {
			delete(ann, k)
		} else {
			ann[k] = v
		}
	}
}

// StatusOf reads a Status from a Lease's annotations; false when none was recorded.
func StatusOf(ann map[string]string) (Status, bool) {
	s := Status{URL: ann[AnnotationURL], Version: ann[AnnotationVersion], Instance: ann[AnnotationInstance],
		LastError: ann[AnnotationLastError], Kind: ann[AnnotationErrorKind]}
	s.LastOK, _ = time.Parse(time.RFC3339, ann[AnnotationLastOK])
	s.LastErrorAt, _ = time.Parse(time.RFC3339, ann[AnnotationLastErrorAt])
	return s, !s.LastOK.IsZero() || !s.LastErrorAt.IsZero()
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(timeLayout)
}

// KindOf says what is to blame for a poll error.
func KindOf(err error) string {
	var unknownCA x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	var verify *tls.CertificateVerificationError
	var answer *api.Error
	switch {
	case errors.Is(err, api.ErrIncompatibleProtocol):
		return KindProtocol
	case errors.Is(err, api.ErrUnauthorized), errors.Is(err, api.ErrForbidden):
		return KindRefused
	case errors.As(err, &unknownCA), errors.As(err, &hostname), errors.As(err, &invalid), errors.As(err, &verify):
		return KindTLS
	case errors.As(err, &answer):
		return KindAnswer
	default:
		return KindNetwork
	}
}

// shortError is err on one line (the lines of joined errors, such as the client's "orchestrator
// unavailable" and its cause, separated by "; "), cut to maxErrorBytes at a character boundary.
// Poll errors carry URLs and causes, never the signed token (it travels in a header).
func shortError(err error) string {
	s := strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", " ; ")), " ")
	s = strings.ReplaceAll(s, " ; ", "; ")
	if len(s) <= maxErrorBytes {
		return s
	}
	cut := maxErrorBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// redactURL drops user info, query and fragment: what the record shows is where the agent
// connects, nothing that could be a credential.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}
