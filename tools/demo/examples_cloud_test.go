package demo

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
)

// The Kubernetes identity of the deployment Jobs that every cloud example binds its cloud role to.
const (
	cloudJobNamespace      = "outpost-jobs"
	cloudJobServiceAccount = "outpost-job"
	cloudJobSubject        = "system:serviceaccount:" + cloudJobNamespace + ":" + cloudJobServiceAccount
	cloudModuleSource      = "../../modules/kubernetes-agent-runner"
	cloudNamesSource       = "../../modules/kubernetes-agent-runner/modules/names"
)

// cloudBinding is a block of an example that binds the cloud identity to the Jobs' service
// account; it must reference the given locals (so it cannot name another service account).
type cloudBinding struct {
	kind, typ, name string
	locals          []string
}

// derivedName is a name a stack derives from the runner id: the attribute attr of block (or the
// local attr when block is "locals") must take it from the names module's output.
type derivedName struct {
	block, attr, output string
}

type cloudExample struct {
	dir         string
	annotations []string // keys the module's job_service_account_annotations must set
	podLabels   []string // keys the module's job_pod_labels must set
	bindings    []cloudBinding
	names       []derivedName
	// deprecated lists arguments a block must not set (deprecated by the cloud provider).
	deprecated map[string][]string
}

var cloudExamples = []cloudExample{
	{
		dir:         "examples/eks",
		annotations: []string{"eks.amazonaws.com/role-arn"},
		bindings: []cloudBinding{
			{"data", "aws_iam_policy_document", "job_trust_irsa", []string{"job_subject"}},
			{"resource", "aws_eks_pod_identity_association", "job", []string{"job_namespace", "job_service_account"}},
		},
		names: []derivedName{
			{"locals", "role_name", "aws_role_name"},
			{"resource.outpost_state_storage.s3", "id", "state_storage_id"},
		},
	},
	{
		dir:         "examples/gke",
		annotations: []string{"iam.gke.io/gcp-service-account"},
		bindings: []cloudBinding{
			{"resource", "google_service_account_iam_member", "job_workload_identity", []string{"job_namespace", "job_service_account"}},
		},
		names: []derivedName{{"resource.google_service_account.job", "account_id", "gcp_service_account_id"}},
	},
	{
		dir:         "examples/aks",
		annotations: []string{"azure.workload.identity/client-id"},
		podLabels:   []string{"azure.workload.identity/use"},
		bindings: []cloudBinding{
			{"resource", "azurerm_federated_identity_credential", "job", []string{"job_subject"}},
		},
		names: []derivedName{
			{"resource.azurerm_user_assigned_identity.job", "name", "azure_identity_name"},
			{"resource.azurerm_federated_identity_credential.job", "name", "azure_federated_credential_name"},
		},
		// azurerm 4.65 deprecated parent_id and 4.60 resource_group_name for this resource (both
		// gone in 5.0); user_assigned_identity_id replaces them.
		deprecated: map[string][]string{"resource.azurerm_federated_identity_credential.job": {"parent_id", "resource_group_name"}},
	},
}

// TestCloudExamples checks the EKS, GKE and AKS root stacks without the cloud providers (which
// cannot be downloaded here): terraform fmt, HCL syntax, documented variables and outputs, a
// module call that only uses the installer module's real inputs, and a cloud binding that names
// the Jobs' service account outpost-jobs/outpost-job.
func TestCloudExamples(t *testing.T) {
	root := repoRoot(t)
	moduleVars := parseModuleVariables(t, filepath.Join(root, "modules", "kubernetes-agent-runner", "variables.tf"))

	for _, ex := range cloudExamples {
		t.Run(filepath.Base(ex.dir), func(t *testing.T) {
			dir := filepath.Join(root, ex.dir)
			t.Run("fmt", func(t *testing.T) { checkTerraformFmt(t, dir) })
			t.Run("hcl", func(t *testing.T) { checkCloudExample(t, dir, ex, moduleVars) })
		})
	}
}

func checkTerraformFmt(t *testing.T, dir string) {
	tf, err := exec.LookPath("terraform")
	if err != nil {
		t.Skip("no terraform binary on PATH")
	}
	cmd := exec.CommandContext(t.Context(), tf, "fmt", "-check", "-recursive", "-diff", dir)
	cmd.Env = append(os.Environ(), "TF_CLI_CONFIG_FILE="+os.DevNull)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("terraform fmt -check -recursive %s: %v\n%s", dir, err, out)
	}
}

// tfFile is one parsed .tf file of a stack.
type tfFile struct {
	name string
	src  []byte
	body *hclsyntax.Body
}

func parseTFFiles(t *testing.T, dir string) []tfFile {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.tf"))
	if err != nil {
		t.Fatal(err)
	}
	if len(names) == 0 {
		t.Fatalf("no .tf files in %s", dir)
	}
	p := hclparse.NewParser()
	var files []tfFile
	for _, name := range names {
		f, diags := p.ParseHCLFile(name)
		if diags.HasErrors() {
			t.Fatalf("%s: %s", name, diags.Error())
		}
		body, ok := f.Body.(*hclsyntax.Body)
		if !ok {
			t.Fatalf("%s: not native HCL syntax", name)
		}
		files = append(files, tfFile{name: filepath.Base(name), src: f.Bytes, body: body})
	}
	return files
}

// parseModuleVariables returns the installer module's variables, and whether each has a default.
func parseModuleVariables(t *testing.T, path string) map[string]bool {
	t.Helper()
	f, diags := hclparse.NewParser().ParseHCLFile(path)
	if diags.HasErrors() {
		t.Fatalf("%s: %s", path, diags.Error())
	}
	body, ok := f.Body.(*hclsyntax.Body)
	if !ok {
		t.Fatalf("%s: not native HCL syntax", path)
	}
	vars := map[string]bool{}
	for _, b := range body.Blocks {
		if b.Type == "variable" && len(b.Labels) == 1 {
			_, hasDefault := b.Body.Attributes["default"]
			vars[b.Labels[0]] = hasDefault
		}
	}
	if len(vars) == 0 {
		t.Fatalf("%s declares no variables", path)
	}
	return vars
}

// literalString evaluates an expression without variables or functions and returns its string.
func literalString(expr hclsyntax.Expression) (string, bool) {
	v, diags := expr.Value(nil)
	if diags.HasErrors() || v.IsNull() || !v.IsKnown() || v.Type() != cty.String {
		return "", false
	}
	return v.AsString(), true
}

// referencedLocals returns the names of the locals referenced anywhere in a body.
func referencedLocals(body *hclsyntax.Body) []string {
	var names []string
	var walk func(*hclsyntax.Body)
	walk = func(b *hclsyntax.Body) {
		for _, a := range b.Attributes {
			for _, tr := range a.Expr.Variables() {
				if tr.RootName() != "local" || len(tr) < 2 {
					continue
				}
				if attr, ok := tr[1].(hcl.TraverseAttr); ok {
					names = append(names, attr.Name)
				}
			}
		}
		for _, nb := range b.Blocks {
			walk(nb.Body)
		}
	}
	walk(body)
	slices.Sort(names)
	return slices.Compact(names)
}

// isLocalRef reports whether expr is exactly local.<name>.
func isLocalRef(expr hclsyntax.Expression, name string) bool {
	st, ok := expr.(*hclsyntax.ScopeTraversalExpr)
	if !ok || len(st.Traversal) != 2 || st.Traversal.RootName() != "local" {
		return false
	}
	attr, ok := st.Traversal[1].(hcl.TraverseAttr)
	return ok && attr.Name == name
}

func checkCloudExample(t *testing.T, dir string, ex cloudExample, moduleVars map[string]bool) {
	files := parseTFFiles(t, dir)

	var (
		module     *hclsyntax.Block
		moduleFile tfFile
		names      *hclsyntax.Block
		locals     = map[string]*hclsyntax.Attribute{}
		blocks     = map[string]*hclsyntax.Block{}
		all        strings.Builder
	)
	for _, f := range files {
		all.Write(f.src)
		for _, b := range f.body.Blocks {
			switch b.Type {
			case "variable":
				checkDocumented(t, f.name, b, "description", "type")
			case "output":
				checkDocumented(t, f.name, b, "description")
			case "locals":
				for name, a := range b.Body.Attributes {
					locals[name] = a
				}
			case "module":
				if len(b.Labels) == 1 && b.Labels[0] == "runner" {
					if module != nil {
						t.Errorf("%s: module \"runner\" declared twice", f.name)
					}
					module, moduleFile = b, f
				}
				if len(b.Labels) == 1 && b.Labels[0] == "names" {
					names = b
				}
			case "resource", "data":
				if len(b.Labels) == 2 {
					blocks[b.Type+"."+b.Labels[0]+"."+b.Labels[1]] = b
				}
			}
		}
	}
	if !strings.Contains(all.String(), cloudJobSubject) {
		t.Errorf("no .tf file of %s names the Jobs' subject %q", dir, cloudJobSubject)
	}

	// The Jobs' identity, spelled out once in locals.
	for name, want := range map[string]string{
		"job_namespace":       cloudJobNamespace,
		"job_service_account": cloudJobServiceAccount,
		"job_subject":         cloudJobSubject,
	} {
		a, ok := locals[name]
		if !ok {
			t.Errorf("local %q is not declared", name)
			continue
		}
		if got, ok := literalString(a.Expr); !ok || got != want {
			t.Errorf("local.%s = %q (literal: %v), want %q", name, got, ok, want)
		}
	}

	// The module call: the installer module by relative path, with real inputs only.
	if module == nil {
		t.Fatalf("%s calls no module \"runner\"", dir)
	}
	src, ok := module.Body.Attributes["source"]
	if !ok {
		t.Fatalf("module \"runner\" has no source")
	}
	if got, ok := literalString(src.Expr); !ok || got != cloudModuleSource {
		t.Errorf("module \"runner\" source = %q, want %q", got, cloudModuleSource)
	} else if _, err := os.Stat(filepath.Join(dir, got, "variables.tf")); err != nil {
		t.Errorf("module source %q does not resolve from %s: %v", got, dir, err)
	}
	meta := []string{"source", "version", "providers", "depends_on", "count", "for_each"}
	for name := range module.Body.Attributes {
		if slices.Contains(meta, name) {
			continue
		}
		if _, ok := moduleVars[name]; !ok {
			t.Errorf("module \"runner\" sets %q, which modules/kubernetes-agent-runner/variables.tf does not declare", name)
		}
	}
	for _, b := range module.Body.Blocks {
		t.Errorf("module \"runner\" has a nested block %q; a module call takes arguments only", b.Type)
	}
	for name, hasDefault := range moduleVars {
		if _, set := module.Body.Attributes[name]; !hasDefault && !set {
			t.Errorf("module \"runner\" does not set the required input %q", name)
		}
	}
	for _, name := range []string{"job_namespace", "job_service_account"} {
		a, ok := module.Body.Attributes[name]
		if !ok || !isLocalRef(a.Expr, name) {
			t.Errorf("module \"runner\" must set %s = local.%s, the identity the cloud binding names", name, name)
		}
	}
	checkKeysIn(t, moduleFile, module, "job_service_account_annotations", ex.annotations)
	checkKeysIn(t, moduleFile, module, "job_pod_labels", ex.podLabels)

	checkDerivedNames(t, files, ex, module, names, locals, blocks)

	// The cloud bindings name the Jobs' service account.
	for _, want := range ex.bindings {
		id := want.kind + "." + want.typ + "." + want.name
		b, ok := blocks[id]
		if !ok {
			t.Errorf("binding %s is missing", id)
			continue
		}
		refs := referencedLocals(b.Body)
		for _, l := range want.locals {
			if !slices.Contains(refs, l) {
				t.Errorf("%s does not reference local.%s (it references locals %v)", id, l, refs)
			}
		}
	}
}

// checkDocumented fails when a variable or output block lacks one of the attributes, or has an
// empty description.
func checkDocumented(t *testing.T, file string, b *hclsyntax.Block, attrs ...string) {
	t.Helper()
	name := b.Type + " " + strings.Join(b.Labels, " ")
	for _, attr := range attrs {
		a, ok := b.Body.Attributes[attr]
		if !ok {
			t.Errorf("%s: %s has no %s", file, name, attr)
			continue
		}
		if attr == "description" {
			if s, ok := literalString(a.Expr); !ok || strings.TrimSpace(s) == "" {
				t.Errorf("%s: %s has an empty or non-literal description", file, name)
			}
		}
	}
}

// checkKeysIn fails unless the module argument's expression mentions every key.
func checkKeysIn(t *testing.T, f tfFile, module *hclsyntax.Block, arg string, keys []string) {
	t.Helper()
	if len(keys) == 0 {
		return
	}
	a, ok := module.Body.Attributes[arg]
	if !ok {
		t.Errorf("module \"runner\" does not set %s (want keys %v)", arg, keys)
		return
	}
	text := string(a.Expr.Range().SliceBytes(f.src))
	for _, k := range keys {
		if !strings.Contains(text, `"`+k+`"`) {
			t.Errorf("module \"runner\" %s does not set %q", arg, k)
		}
	}
}

// checkDerivedNames: the runner id enters the stack once, through module "names" (which checks
// it), and every name made from it comes from that module's outputs; no block sets an argument
// its provider deprecated.
func checkDerivedNames(t *testing.T, files []tfFile, ex cloudExample, module, names *hclsyntax.Block,
	locals map[string]*hclsyntax.Attribute, blocks map[string]*hclsyntax.Block,
) {
	t.Helper()
	if names == nil {
		t.Fatalf("%s calls no module \"names\"", ex.dir)
	}
	if src, ok := names.Body.Attributes["source"]; !ok {
		t.Errorf("module \"names\" has no source")
	} else if got, _ := literalString(src.Expr); got != cloudNamesSource {
		t.Errorf("module \"names\" source = %q, want %q", got, cloudNamesSource)
	}
	exprText := func(a *hclsyntax.Attribute) string {
		for _, f := range files {
			if f.name == a.SrcRange.Filename || strings.HasSuffix(a.SrcRange.Filename, "/"+f.name) {
				return string(a.Expr.Range().SliceBytes(f.src))
			}
		}
		return ""
	}
	if a, ok := names.Body.Attributes["runner_id"]; !ok || exprText(a) != "var.runner_id" {
		t.Errorf("module \"names\" must take runner_id = var.runner_id")
	}
	if a, ok := module.Body.Attributes["runner_id"]; !ok || exprText(a) != "module.names.runner_id" {
		t.Errorf("module \"runner\" must take runner_id = module.names.runner_id, the checked id")
	}
	for _, n := range ex.names {
		var a *hclsyntax.Attribute
		if n.block == "locals" {
			a = locals[n.attr]
		} else if b, ok := blocks[n.block]; ok {
			a = b.Body.Attributes[n.attr]
		}
		if a == nil {
			t.Errorf("%s has no %s", n.block, n.attr)
			continue
		}
		if want := "module.names." + n.output; !strings.Contains(exprText(a), want) {
			t.Errorf("%s.%s = %s, want it to use %s", n.block, n.attr, exprText(a), want)
		}
	}
	// Only module "names" and free text may use var.runner_id: a name built from it elsewhere
	// would not be checked against its limit.
	var walk func(where string, b *hclsyntax.Body)
	walk = func(where string, b *hclsyntax.Body) {
		for name, a := range b.Attributes {
			for _, tr := range a.Expr.Variables() {
				if tr.RootName() != "var" || len(tr) < 2 {
					continue
				}
				if v, ok := tr[1].(hcl.TraverseAttr); !ok || v.Name != "runner_id" {
					continue
				}
				if (where == "module.names" && name == "runner_id") || name == "description" || name == "display_name" {
					continue
				}
				t.Errorf("%s.%s uses var.runner_id directly; derive the name in modules/kubernetes-agent-runner/modules/names", where, name)
			}
		}
		for _, nb := range b.Blocks {
			walk(where+"."+nb.Type, nb.Body)
		}
	}
	for _, f := range files {
		for _, b := range f.body.Blocks {
			walk(strings.Join(append([]string{b.Type}, b.Labels...), "."), b.Body)
		}
	}
	for id, attrs := range ex.deprecated {
		b, ok := blocks[id]
		if !ok {
			t.Errorf("%s is missing", id)
			continue
		}
		for _, attr := range attrs {
			if _, set := b.Body.Attributes[attr]; set {
				t.Errorf("%s sets %s, which its provider deprecated", id, attr)
			}
		}
	}
}
