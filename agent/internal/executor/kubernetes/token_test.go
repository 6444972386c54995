package kubernetes

import (
	"slices"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
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
	e := New(Options{Client: cs, Pod: opts})
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
		e := New(Options{Client: cs, Pod: opts})
		if err := e.Start(t.Context(), c, "opst_test"); err != nil {
			t.Fatal(err)
		}
		job, err := cs.BatchV1().Jobs("jobs").Get(t.Context(), JobName(c.DeploymentID, c.Attempt), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if restarted {
			e = New(Options{Client: cs, Pod: opts})
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
