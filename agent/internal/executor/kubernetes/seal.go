package kubernetes

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"unicode/utf8"

	batchv1 "k8s.io/api/batch/v1"
)

// The jobs namespace is shared with what the job pods (and whoever else may write there) can
// write, so nothing the agent reads back from a Job is trusted unless the agent wrote it. Every
// Job it creates carries a seal: an HMAC-SHA256, keyed from the runner's private key, over the
// Job's identity and everything the agent acts on after a restart (the attempt, its fencing
// number, operation, state key and namespace, and the digest of its job token). A Job without a
// valid seal is not the agent's: it is neither restated in polls nor adopted, its token is never
// registered, and nothing of it is deleted. The pending event, written later, carries its own
// seal.

// SealKey derives the key of the seals from the runner's private key, so every replica of the
// agent (and the next process) shares it, and nobody without the private key can forge a seal.
func SealKey(priv ed25519.PrivateKey) []byte {
	m := hmac.New(sha256.New, priv.Seed())
	m.Write([]byte("outpost job seal v1"))
	return m.Sum(nil)
}

// randomSealKey is the key of an executor given none (tests): its seals do not outlive it.
func randomSealKey() []byte {
	k := make([]byte, 32)
	_, _ = rand.Read(k)
	return k
}

// tokenDigest is the hex SHA-256 of a job token: sealed on the Job, it lets the agent check the
// token Secret it reads back.
func tokenDigest(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// sealedFields are what a Job's seal covers, in a fixed order.
func sealedFields(j *batchv1.Job) []string {
	f := []string{
		"job", j.Namespace, j.Name,
		j.Labels[LabelManagedBy], j.Labels[LabelOrgID], j.Labels[LabelRunnerID], j.Labels[LabelDeploymentID], j.Labels[LabelAttempt],
		j.Annotations[AnnDeploymentID], j.Annotations[AnnFencing], j.Annotations[AnnOperation],
		j.Annotations[AnnStateKey], j.Annotations[AnnStateNS], j.Annotations[AnnClaimedAt], j.Annotations[AnnTokenSHA256],
	}
	// Only when set, so the seals of Jobs from before saved plans still hold.
	if p, ok := j.Annotations[AnnPlanOf]; ok {
		f = append(f, "plan-of", p)
	}
	return f
}

// macWith is the seal of fields under one key.
func macWith(key []byte, fields []string) string {
	// JSON keeps the fields apart whatever they contain.
	msg, _ := json.Marshal(fields)
	m := hmac.New(sha256.New, key)
	m.Write(msg)
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// SetSealKeys replaces the keys of the seals (SealKey of each of the runner's private keys the
// agent holds, newest first; see package keyring): new seals are made with the first, and a
// seal made with any of them holds, so the Jobs created before a key rotation stay the agent's.
func (e *Executor) SetSealKeys(keys [][]byte) {
	if len(keys) > 0 {
		e.sealKeys.Store(&keys)
	}
}

func (e *Executor) keys() [][]byte { return *e.sealKeys.Load() }

// mac is the seal of fields under the newest key.
func (e *Executor) mac(fields []string) string { return macWith(e.keys()[0], fields) }

// macHolds reports whether got is the seal of fields under any of the keys. A field that is not
// valid UTF-8 never holds: JSON (macWith) spells every invalid byte as U+FFFD, so "\xc2" and
// "\xb3" would share a seal, and the agent never seals such a value (found by FuzzJobStatus).
func (e *Executor) macHolds(got string, fields []string) bool {
	for _, f := range fields {
		if !utf8.ValidString(f) {
			return false
		}
	}
	for _, k := range e.keys() {
		if equalMAC(got, macWith(k, fields)) {
			return true
		}
	}
	return false
}

// seal puts the seal on a Job the agent is about to create.
func (e *Executor) seal(j *batchv1.Job) {
	j.Annotations[AnnSeal] = e.mac(sealedFields(j))
}

// sealed reports whether the Job carries a valid seal of this agent.
func (e *Executor) sealed(j *batchv1.Job) bool {
	return e.macHolds(j.Annotations[AnnSeal], sealedFields(j))
}

// eventSeal seals a pending event to its Job (by UID, so it cannot be copied to another Job).
func (e *Executor) eventSeal(j *batchv1.Job, event string) string {
	return e.mac(eventSealFields(j, event))
}

func eventSealFields(j *batchv1.Job, event string) []string {
	return []string{"pending-event", string(j.UID), event}
}

// pendingEvent returns the Job's pending event if its seal holds.
func (e *Executor) pendingEvent(j *batchv1.Job) (string, bool) {
	ev := j.Annotations[AnnPendingEvent]
	if ev == "" {
		return "", false
	}
	return ev, e.macHolds(j.Annotations[AnnPendingEventSeal], eventSealFields(j, ev))
}

func equalMAC(got, want string) bool {
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}
