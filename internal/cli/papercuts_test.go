package cli_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/cli"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client/clienttest"
)

// archiveNames lists the files of a deployment's inline source.
func archiveNames(t *testing.T, h *harness, id string) []string {
	t.Helper()
	d, err := h.admin().GetDeployment(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(d.Source.Inline.ArchiveTarGz))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var names []string
	for {
		hd, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return names
		}
		if err != nil {
			t.Fatal(err)
		}
		if hd.Typeflag == tar.TypeReg {
			names = append(names, hd.Name)
		}
	}
}

// deploy DIR leaves out what the directory's .outpostignore names (or its .terraformignore, the
// HCP Terraform convention, when it has no .outpostignore), says what it left out, and refuses
// a source too large by naming its largest files. Before, local *.tfvars, .env and every large
// file were uploaded, and the refusal named no file.
func TestDeployHonoursIgnoreFiles(t *testing.T) {
	h := configured(t)
	clienttest.Register(t, h.admin(), h.inst.URL, "eu-1")
	h.write("app/main.tf", "output \"x\" { value = 1 }\n")
	h.write("app/prod.auto.tfvars", "x = 1\n")
	h.write("app/local.tfvars", "password = \"hunter2\"\n")
	h.write("app/.env", "AWS_SECRET_ACCESS_KEY=x\n")
	h.write("app/build/blob.bin", "binary")
	dir := h.dir + "/app"

	h.write("app/.terraformignore", "*.tfvars\n!*.auto.tfvars\n.env\n")
	r := h.run("", "deploy", dir, "--runner", "eu-1", "--state-key", "k")
	h.check(r, 0, []string{"deploy (.terraformignore)"}, "left out .env, local.tfvars (read .terraformignore)")
	if got := archiveNames(t, h, strings.TrimSpace(r.stdout)); !slices.Equal(got, []string{".terraformignore", "build/blob.bin", "main.tf", "prod.auto.tfvars"}) {
		t.Errorf("packed with .terraformignore: %q", got)
	}

	h.write("app/.outpostignore", "*.tfvars\n!prod.auto.tfvars\n.env\n/build/\n")
	r = h.run("", "deploy", dir, "--runner", "eu-1", "--state-key", "k")
	h.check(r, 0, []string{"deploy (.outpostignore)"}, "left out .env, build/, local.tfvars (read .outpostignore)")
	if got := archiveNames(t, h, strings.TrimSpace(r.stdout)); !slices.Equal(got, []string{".outpostignore", ".terraformignore", "main.tf", "prod.auto.tfvars"}) {
		t.Errorf("packed with .outpostignore: %q", got)
	}

	// 13 MiB that do not compress: refused before anything is uploaded, naming the file and the
	// way to leave it out.
	big := make([]byte, 13<<20)
	_, _ = rand.Read(big)
	h.write("app/data/big.bin", string(big))
	h.expect(cli.ExitError, []string{"deploy", dir, "--runner", "eu-1", "--state-key", "k"},
		"source archive too large", "the largest files: data/big.bin (13.0 MiB), .outpostignore (", ".outpostignore")
	h.write("app/.outpostignore", "*.tfvars\n!prod.auto.tfvars\n.env\n/build/\n*.bin\n")
	h.expect(0, []string{"deploy", dir, "--runner", "eu-1", "--state-key", "k"}, "left out .env, build/, data/big.bin, local.tfvars")
}

// The command line takes --insecure-allow-http and OUTPOST_INSECURE_ALLOW_HTTP, as the provider
// and the agent do, for a plain http orchestrator that is not loopback; without either the
// refusal names them, never a Go identifier. (http://0.0.0.0 is not a loopback address, yet
// reaches this machine's loopback listener, so the test stays on this machine.)
func TestInsecureAllowHTTP(t *testing.T) {
	h := configured(t)
	url := strings.Replace(h.inst.URL, "127.0.0.1", "0.0.0.0", 1)
	h.setenv("OUTPOST_API_URL", url)
	r := h.expect(cli.ExitError, []string{"state-storage", "list"}, "unencrypted", "--insecure-allow-http (or OUTPOST_INSECURE_ALLOW_HTTP=true)", "from OUTPOST_API_URL")
	if strings.Contains(r.stderr, "client.") || strings.Contains(r.stderr, "AllowInsecureHTTP") {
		t.Errorf("the refusal names a Go identifier:\n%s", r.stderr)
	}
	h.expect(cli.ExitError, []string{"state-storage", "list", "--insecure-allow-http"}, `no such organisation "acme"`)
	h.setenv("OUTPOST_INSECURE_ALLOW_HTTP", "true")
	h.expect(cli.ExitError, []string{"state-storage", "list"}, `no such organisation "acme"`)
	h.setenv("OUTPOST_INSECURE_ALLOW_HTTP", "yes please")
	h.expect(cli.ExitUsage, []string{"state-storage", "list"}, `OUTPOST_INSECURE_ALLOW_HTTP="yes please" is not true or false`)
}

// Each short flag means one thing: -f is --file (create, update). --follow has no short form in
// the help any more; -f still follows in deploy and deployment logs, with a note saying so.
func TestShortFlagsMeanOneThing(t *testing.T) {
	h := configured(t)
	ag := clienttest.Register(t, h.admin(), h.inst.URL, "eu-1")
	for _, cmd := range [][]string{{"deploy", "--help"}, {"deployment", "logs", "--help"}} {
		r := h.must(cmd...)
		if strings.Contains(r.stdout, "-f, --follow") || !strings.Contains(r.stdout, "--follow") {
			t.Errorf("outpost %s shows -f as --follow:\n%s", strings.Join(cmd, " "), r.stdout)
		}
	}
	for _, cmd := range []string{"runner", "state-storage"} {
		for _, sub := range []string{"create", "update"} {
			if r := h.must(cmd, sub, "--help"); !strings.Contains(r.stdout, "-f, --file") {
				t.Errorf("outpost %s %s --help lacks -f, --file:\n%s", cmd, sub, r.stdout)
			}
		}
	}
	id := queue(h, "--plan")
	run := ag.Start(t, id)
	run.Finish(t, api.StatusSucceeded, 0)
	h.expect(cli.ExitOK, []string{"deployment", "logs", id, "-f"}, "Flag shorthand -f has been deprecated, use --follow", "succeeded")
}

// A mistyped organisation is "no such organisation", from the API (which answers org_not_found
// instead of an empty list) and in the command line's words; invalid ids are refused before
// anything is sent, with the valid id the provider's runner_id function would make of them.
func TestUnknownOrganisationAndInvalidIDs(t *testing.T) {
	h := configured(t)
	clienttest.Register(t, h.admin(), h.inst.URL, "eu-1")
	h.expect(0, []string{"runner", "list"}, "eu-1")
	h.expect(cli.ExitError, []string{"runner", "list", "--org", "acmee"}, `no such organisation "acmee"`, "flag --org", "outpost config set org NAME")
	h.expect(cli.ExitError, []string{"deploy", source(h), "--runner", "eu-1", "--state-key", "k", "--org", "acmee"}, `no such organisation "acmee"`)

	const ctx = "arn:aws:eks:eu-west-1:123456789012:cluster/prod"
	want := "arn-aws-eks-eu-west-1-123456789012-cluster-prod"
	h.expect(cli.ExitUsage, []string{"runner", "get", ctx}, "runner id", "not valid", "a valid id made from it is "+want, "runner_id function")
	h.expect(cli.ExitUsage, []string{"runner", "delete", "eu-1", ctx}, "a valid id made from it is "+want)
	h.expect(cli.ExitUsage, []string{"runner", "create", ctx, "--set", "state_storage_id=s"}, "a valid id made from it is "+want)
	h.expect(cli.ExitUsage, []string{"state-storage", "create", "--set", "id=Team_States", "--set", "type=kubernetes"}, "state storage id", "a valid id made from it is team-states")
	h.expect(cli.ExitUsage, []string{"deploy", source(h), "--runner", "gke_acme_europe-west1_prod", "--state-key", "k"}, "--runner", "a valid id made from it is gke-acme-europe-west1-prod")
	h.expect(cli.ExitUsage, []string{"runner", "list", "--org", "Acme Corp"}, "the organisation (from flag --org)", "a valid id made from it is acme-corp")
	if got, err := h.admin().ListRunners(t.Context()); err != nil || len(got) != 1 {
		t.Fatalf("runners after the refusals: %v, %v", got, err)
	}
}
