package store

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// JobTokenPayload is what a job token stands for: one grant (fencing number) of the job lease on
// one attempt of a deployment.
type JobTokenPayload struct {
	Org        string
	Deployment string
	Attempt    int
	Fencing    int64
}

// encode is the payload as the token carries it (and its MAC covers).
func (c JobTokenPayload) encode() string {
	return c.Org + "|" + c.Deployment + "|" + strconv.Itoa(c.Attempt) + "|" + strconv.FormatInt(c.Fencing, 10)
}

// jobTokenDomain separates these MACs from any other use of the server secret.
const jobTokenDomain = "outpost job token v1\x00"

func jobTokenMAC(secret []byte, payload string) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(jobTokenDomain))
	m.Write([]byte(payload))
	return m.Sum(nil)
}

// MintJobToken derives the token of a grant: opj_<payload>.<HMAC>. It is a pure function of the
// server secret and the grant, so an idempotent re-claim returns the same token without the
// server ever storing one.
func MintJobToken(secret []byte, c JobTokenPayload) string {
	p := c.encode()
	return api.JobTokenPrefix + base64.RawURLEncoding.EncodeToString([]byte(p)) + "." +
		base64.RawURLEncoding.EncodeToString(jobTokenMAC(secret, p))
}

// parseJobToken checks a token's MAC and returns the grant it stands for. Whether the grant is
// still current is the store's question (checkJobToken).
func parseJobToken(secret []byte, raw string) (JobTokenPayload, error) {
	bad := func(why string) (JobTokenPayload, error) {
		return JobTokenPayload{}, &Refusal{Code: api.CodeUnauthorized, AuthReason: AuthReasonJobToken,
			Message: "job token refused: " + why}
	}
	rest, ok := strings.CutPrefix(raw, api.JobTokenPrefix)
	if !ok {
		return bad("it must start with " + api.JobTokenPrefix)
	}
	p64, m64, ok := strings.Cut(rest, ".")
	if !ok {
		return bad("malformed")
	}
	p, err1 := base64.RawURLEncoding.DecodeString(p64)
	mac, err2 := base64.RawURLEncoding.DecodeString(m64)
	if err1 != nil || err2 != nil {
		return bad("malformed")
	}
	if !hmac.Equal(mac, jobTokenMAC(secret, string(p))) {
		return bad("not issued by this orchestrator")
	}
	parts := strings.Split(string(p), "|")
	if len(parts) != 4 {
		return bad("malformed")
	}
	attempt, err1 := strconv.Atoi(parts[2])
	fencing, err2 := strconv.ParseInt(parts[3], 10, 64)
	if err1 != nil || err2 != nil {
		return bad("malformed")
	}
	return JobTokenPayload{Org: parts[0], Deployment: parts[1], Attempt: attempt, Fencing: fencing}, nil
}

// ParseJobToken checks a token against the store's secret and returns the grant it stands for.
func (s *Store) ParseJobToken(raw string) (JobTokenPayload, error) {
	return parseJobToken(s.secret, raw)
}

// checkJobToken decides whether a genuine token still speaks for the deployment: it must be for the
// current grant (a superseded attempt gets stale_fencing, so its job runner stops), and a finished
// deployment accepts it only for the grace period, so the job runner can flush its last log lines
// and outputs.
func checkJobToken(rec *DeploymentRecord, c JobTokenPayload, now time.Time, grace time.Duration) error {
	if rec.D.Attempt != c.Attempt || rec.Fencing != c.Fencing {
		return staleFencing("this job token is for attempt %d (fencing %d), but deployment %q is now at attempt %d (fencing %d); stop this run",
			c.Attempt, c.Fencing, c.Deployment, rec.D.Attempt, rec.Fencing)
	}
	if rec.D.Status.Terminal() && rec.D.FinishedAt != nil && now.After(rec.D.FinishedAt.Add(grace)) {
		return &Refusal{Code: api.CodeUnauthorized, AuthReason: AuthReasonJobTokenExpired,
			Message: fmt.Sprintf("job token expired: deployment %q ended at %s and job tokens stay valid for %s after the end",
				c.Deployment, rec.D.FinishedAt.Format(time.RFC3339), grace)}
	}
	return nil
}
