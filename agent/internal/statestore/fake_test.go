package statestore

import (
	"fmt"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// newFakeClient returns a fake clientset that behaves like the API server where the store
// depends on it and the stock fake does not: objects get resource versions, updates with a
// stale resourceVersion fail with Conflict, and DeleteCollection honours its label selector.
func newFakeClient() *fake.Clientset {
	cs := fake.NewClientset()
	tracker := cs.Tracker()
	var mu sync.Mutex
	rv := 100
	next := func() string { rv++; return fmt.Sprint(rv) }

	for _, resource := range []string{"secrets", "leases"} {
		cs.PrependReactor("create", resource, func(a k8stesting.Action) (bool, runtime.Object, error) {
			mu.Lock()
			defer mu.Unlock()
			ca, ok := a.(k8stesting.CreateAction)
			if !ok {
				return false, nil, nil
			}
			obj := ca.GetObject().DeepCopyObject()
			m, _ := meta.Accessor(obj)
			if m.GetNamespace() == "" {
				m.SetNamespace(a.GetNamespace())
			}
			m.SetResourceVersion(next())
			if err := tracker.Create(a.GetResource(), obj, a.GetNamespace()); err != nil {
				return true, nil, err
			}
			return true, obj, nil
		})
		cs.PrependReactor("update", resource, func(a k8stesting.Action) (bool, runtime.Object, error) {
			mu.Lock()
			defer mu.Unlock()
			ua, ok := a.(k8stesting.UpdateAction)
			if !ok {
				return false, nil, nil
			}
			obj := ua.GetObject().DeepCopyObject()
			m, _ := meta.Accessor(obj)
			cur, err := tracker.Get(a.GetResource(), a.GetNamespace(), m.GetName())
			if err != nil {
				return true, nil, err
			}
			cm, _ := meta.Accessor(cur)
			if m.GetResourceVersion() != "" && m.GetResourceVersion() != cm.GetResourceVersion() {
				return true, nil, apierrors.NewConflict(a.GetResource().GroupResource(), m.GetName(),
					fmt.Errorf("the object has been modified"))
			}
			m.SetResourceVersion(next())
			if err := tracker.Update(a.GetResource(), obj, a.GetNamespace()); err != nil {
				return true, nil, err
			}
			return true, obj, nil
		})
		cs.PrependReactor("delete-collection", resource, func(a k8stesting.Action) (bool, runtime.Object, error) {
			mu.Lock()
			defer mu.Unlock()
			da, ok := a.(k8stesting.DeleteCollectionAction)
			if !ok {
				return false, nil, nil
			}
			sel, err := labels.Parse(da.GetListRestrictions().Labels.String())
			if err != nil {
				return true, nil, err
			}
			gvk := schema.GroupVersionKind{Group: a.GetResource().Group, Version: a.GetResource().Version, Kind: map[string]string{"secrets": "Secret", "leases": "Lease"}[a.GetResource().Resource]}
			list, err := tracker.List(a.GetResource(), gvk, a.GetNamespace())
			if err != nil {
				return true, nil, err
			}
			items, _ := meta.ExtractList(list)
			for _, it := range items {
				m, _ := meta.Accessor(it)
				if sel.Matches(labels.Set(m.GetLabels())) {
					if err := tracker.Delete(a.GetResource(), a.GetNamespace(), m.GetName()); err != nil && !apierrors.IsNotFound(err) {
						return true, nil, err
					}
				}
			}
			return true, nil, nil
		})
	}
	return cs
}

// LeaseName is the name of the Lease that locks an unscoped state.
func LeaseName(key string) string { return "tflock-" + StateHash(key) }
