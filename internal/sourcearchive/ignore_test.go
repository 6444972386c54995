package sourcearchive

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// ignoreTree is a directory of a Terraform configuration with what people keep beside it.
var ignoreTree = []string{
	"main.tf", "variables.tf", "prod.tfvars", "dev.tfvars", "prod.auto.tfvars", ".env", "nested/.env",
	"build/out.bin", "modules/build/keep.tf", "docs/a.md", "docs/x/y/b.md", "docs/c.txt", "tmp/t.tf",
	"modules/net/tmp/t.tf", "a/b", "a/x/b", "a/x/y/b", "ab", "app.log", "app.lag", "app.lug", "#notes",
	"foo1", "foo12", "keep/me.tf", "keep/drop.tf", "trailing ", "vendor/v.tf", "vendor/keep.tf",
	"deep/er/vendor/v.tf", "x[1].tf", "star*.tf", "q.tf",
}

// ignoreRulesUnderTest use every piece of .gitignore syntax.
const ignoreRulesUnderTest = `# secrets and local variables
*.tfvars
!prod.auto.tfvars
.env
/build/
docs/**/*.md
**/tmp
a/**/b
*.l[!u]g
\#notes
foo?
keep/*
!keep/me.tf
trailing\ 
vendor/
[x]\[1\].tf
star\*.tf
  
`

// Pack leaves out exactly what git leaves out for the same rules in a .gitignore: the same
// syntax, checked against git itself on a tree that uses every part of it.
func TestIgnoreFileLeavesOutWhatGitWould(t *testing.T) {
	gitPath, err := exec.LookPath("git")
	if err != nil {
		t.Fatalf("git is needed to compare with: %v", err)
	}
	dir := t.TempDir()
	files := map[string]string{}
	for _, f := range ignoreTree {
		files[f] = "x\n"
	}
	files[OutpostIgnoreFile] = ignoreRulesUnderTest
	files[".gitignore"] = ignoreRulesUnderTest
	write(t, dir, files)
	cmd := exec.CommandContext(t.Context(), gitPath, "init", "-q", dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git init: %v\n%s", err, out)
	}
	cmd = exec.CommandContext(t.Context(), gitPath, "-C", dir, "ls-files", "--others", "--exclude-standard")
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_SYSTEM=/dev/null")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	want := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(want) < 10 || len(want) > len(ignoreTree)-10 {
		t.Fatalf("git kept %d of %d files, the rules are not exercised: %q", len(want), len(ignoreTree)+2, want)
	}

	a, err := Pack(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	order, es := entries(t, a.Data)
	for _, name := range order {
		if es[name].typ != '5' { // files only, as git lists them
			got = append(got, name)
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("packed files differ from what git keeps\n packed: %q\n    git: %q", got, want)
	}
	if a.IgnoreFile != OutpostIgnoreFile || !slices.Contains(a.Skipped, "build/") || !slices.Contains(a.Skipped, "prod.tfvars") {
		t.Errorf("ignore file %q, skipped %q", a.IgnoreFile, a.Skipped)
	}
}

// .terraformignore (HCP Terraform's file) is read when there is no .outpostignore; with both,
// .outpostignore alone counts.
func TestTerraformIgnoreIsReadWithoutOutpostIgnore(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, map[string]string{"main.tf": "", "big.bin": "x", "notes.txt": "x", TerraformIgnoreFile: "*.bin\n"})
	a, err := Pack(dir)
	if err != nil {
		t.Fatal(err)
	}
	if a.IgnoreFile != TerraformIgnoreFile || !slices.Equal(a.Skipped, []string{"big.bin"}) {
		t.Fatalf(".terraformignore alone: ignore file %q, skipped %q", a.IgnoreFile, a.Skipped)
	}
	write(t, dir, map[string]string{OutpostIgnoreFile: "*.txt\n"})
	if a, err = Pack(dir); err != nil {
		t.Fatal(err)
	}
	if a.IgnoreFile != OutpostIgnoreFile || !slices.Equal(a.Skipped, []string{"notes.txt"}) {
		t.Fatalf("both files: ignore file %q, skipped %q; want .outpostignore alone", a.IgnoreFile, a.Skipped)
	}
}

// A refusal for size names the largest files and the ignore file that leaves them out.
func TestCheckNamesTheLargestFiles(t *testing.T) {
	a := &Archive{Data: make([]byte, MaxBytes+1)}
	for _, f := range []File{{"a.tf", 10}, {"blob.bin", 19 << 20}, {"b.tf", 20}, {"c.zip", 3 << 20}, {"d", 30}, {"e", 40}, {"f", 5}} {
		a.noteSize(f.Name, f.Size)
	}
	err := a.Check()
	if err == nil || !strings.Contains(err.Error(), "the largest files: blob.bin (19.0 MiB), c.zip (3.0 MiB), e (40 B), d (30 B), b.tf (20 B).") ||
		!strings.Contains(err.Error(), OutpostIgnoreFile) {
		t.Fatalf("Check: %v", err)
	}
}
