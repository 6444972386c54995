package helm

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
	kubefake "helm.sh/helm/v3/pkg/kube/fake"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/storage"
	"helm.sh/helm/v3/pkg/storage/driver"
)

// testConfig is Helm's own fixture pattern: releases in memory, a kube client that only prints.
func testConfig(t *testing.T) *action.Configuration {
	t.Helper()
	mem := driver.NewMemory()
	mem.SetNamespace("ns")
	return &action.Configuration{
		Releases:     storage.Init(mem),
		KubeClient:   &kubefake.PrintingKubeClient{Out: io.Discard},
		Capabilities: chartutil.DefaultCapabilities,
		Log:          t.Logf,
	}
}

func testChart() *chart.Chart {
	return &chart.Chart{
		Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: "demo", Version: "1.2.3", AppVersion: "4.5.6"},
		Templates: []*chart.File{{
			Name: "templates/cm.yaml",
			Data: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: demo\ndata:\n  greeting: {{ .Values.greeting | quote }}\n"),
		}},
		Values: map[string]any{"greeting": "hello"},
	}
}

var testOpts = InstallOptions{ReleaseName: "demo", Namespace: "ns", Timeout: time.Minute, Description: "test"}

func TestInstallUpgradeGetHistory(t *testing.T) {
	ctx := context.Background()
	cfg := testConfig(t)

	if _, err := Get(cfg, "demo"); !IsNotFound(err) {
		t.Fatalf("Get of a missing release: want not found, got %v", err)
	}
	rel, err := Install(ctx, cfg, testChart(), map[string]any{"greeting": "hi"}, testOpts)
	if err != nil {
		t.Fatal(err)
	}
	if rel.Info.Status != release.StatusDeployed || rel.Version != 1 {
		t.Fatalf("install: status %s revision %d", rel.Info.Status, rel.Version)
	}
	rel, err = Upgrade(ctx, cfg, testChart(), map[string]any{"greeting": "hey"}, testOpts)
	if err != nil {
		t.Fatal(err)
	}
	if rel.Version != 2 {
		t.Fatalf("upgrade: revision %d, want 2", rel.Version)
	}
	got, err := Get(cfg, "demo")
	if err != nil {
		t.Fatal(err)
	}
	if got.Config["greeting"] != "hey" {
		t.Fatalf("values after upgrade: %v", got.Config)
	}
	hist, err := History(cfg, "demo")
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) != 2 || hist[0].Version != 1 || hist[1].Version != 2 {
		t.Fatalf("history: %d revisions", len(hist))
	}
	if err := Uninstall(ctx, cfg, "demo", time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := Get(cfg, "demo"); !IsNotFound(err) {
		t.Fatalf("Get after uninstall: want not found, got %v", err)
	}
	if err := Uninstall(ctx, cfg, "demo", time.Minute); err != nil {
		t.Fatalf("uninstall of a missing release must succeed: %v", err)
	}
}

func TestCanceledContextStopsInstall(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	cfg := testConfig(t)
	if _, err := Install(ctx, cfg, testChart(), nil, testOpts); !errors.Is(err, context.Canceled) {
		t.Fatalf("install with a canceled context: got %v", err)
	}
	if _, err := Upgrade(ctx, cfg, testChart(), nil, testOpts); !errors.Is(err, context.Canceled) {
		t.Fatalf("upgrade with a canceled context: got %v", err)
	}
	if err := Uninstall(ctx, cfg, "demo", time.Minute); !errors.Is(err, context.Canceled) {
		t.Fatalf("uninstall with a canceled context: got %v", err)
	}
	if _, err := Get(cfg, "demo"); !IsNotFound(err) {
		t.Fatalf("a canceled install left a release behind: %v", err)
	}
}

func TestRecoverPending(t *testing.T) {
	ctx := context.Background()
	setStatus := func(t *testing.T, cfg *action.Configuration, s release.Status) {
		t.Helper()
		rel, err := Get(cfg, "demo")
		if err != nil {
			t.Fatal(err)
		}
		rel.Info.Status = s
		if err := cfg.Releases.Update(rel); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("not installed", func(t *testing.T) {
		rec, err := RecoverPending(ctx, testConfig(t), "demo", time.Minute)
		if err != nil || rec.Action != RecoveryNone {
			t.Fatalf("got %+v, %v", rec, err)
		}
	})

	t.Run("deployed is left alone", func(t *testing.T) {
		cfg := testConfig(t)
		if _, err := Install(ctx, cfg, testChart(), nil, testOpts); err != nil {
			t.Fatal(err)
		}
		rec, err := RecoverPending(ctx, cfg, "demo", time.Minute)
		if err != nil || rec.Action != RecoveryNone {
			t.Fatalf("got %+v, %v", rec, err)
		}
	})

	t.Run("pending-upgrade rolls back to the deployed revision", func(t *testing.T) {
		cfg := testConfig(t)
		if _, err := Install(ctx, cfg, testChart(), map[string]any{"greeting": "v1"}, testOpts); err != nil {
			t.Fatal(err)
		}
		if _, err := Upgrade(ctx, cfg, testChart(), map[string]any{"greeting": "v2"}, testOpts); err != nil {
			t.Fatal(err)
		}
		setStatus(t, cfg, release.StatusPendingUpgrade)
		// Helm itself refuses to upgrade now.
		if _, err := Upgrade(ctx, cfg, testChart(), nil, testOpts); err == nil {
			t.Fatal("upgrade of a pending release succeeded; the test does not reproduce the problem")
		}
		rec, err := RecoverPending(ctx, cfg, "demo", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Action != RecoveryRollback || rec.PendingRevision != 2 || rec.RolledBackTo != 1 || rec.PendingStatus != release.StatusPendingUpgrade {
			t.Fatalf("recovery: %+v", rec)
		}
		rel, err := Get(cfg, "demo")
		if err != nil {
			t.Fatal(err)
		}
		if rel.Info.Status != release.StatusDeployed || rel.Version != 3 || rel.Config["greeting"] != "v1" {
			t.Fatalf("after recovery: revision %d status %s values %v", rel.Version, rel.Info.Status, rel.Config)
		}
		if _, err := Upgrade(ctx, cfg, testChart(), map[string]any{"greeting": "v4"}, testOpts); err != nil {
			t.Fatalf("upgrade after recovery: %v", err)
		}
	})

	t.Run("pending-install without a deployed revision is uninstalled", func(t *testing.T) {
		cfg := testConfig(t)
		if _, err := Install(ctx, cfg, testChart(), nil, testOpts); err != nil {
			t.Fatal(err)
		}
		setStatus(t, cfg, release.StatusPendingInstall)
		rec, err := RecoverPending(ctx, cfg, "demo", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Action != RecoveryUninstall {
			t.Fatalf("recovery: %+v", rec)
		}
		if _, err := Get(cfg, "demo"); !IsNotFound(err) {
			t.Fatalf("release still there after recovery: %v", err)
		}
		if _, err := Install(ctx, cfg, testChart(), nil, testOpts); err != nil {
			t.Fatalf("install after recovery: %v", err)
		}
	})
}
