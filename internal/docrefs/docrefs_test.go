package docrefs

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	// mdLink is the target of a Markdown link: [text](target).
	mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	// repoPath is a path into the repository: it starts with one of its top-level directories and
	// names a file (or a glob of files) by extension. URL paths such as agent/poll have none.
	repoPath = regexp.MustCompile("(?:^|[\\s`'\"(\\[])((?:agent|internal|cmd|tools|scripts|docs|examples|modules|templates|\\.ci)/[\\w./*-]*\\.(?:go|md|sh|mk|ya?ml|json|tf|tmpl|env|txt))\\b")
	// quotedDir is a directory of the repository quoted on its own: `internal/testbed/components`.
	quotedDir = regexp.MustCompile("`((?:agent|internal|cmd|tools|scripts|docs|examples|modules|templates|\\.ci)/[\\w./-]*[\\w-])/?`")
	// topDoc is a document named in capitals, such as ARCHITECTURE.md.
	topDoc = regexp.MustCompile(`\b([A-Z][A-Z_-]+\.md)\b`)
	// makeTarget is a make target a reader is told to run: `make test`.
	makeTarget = regexp.MustCompile("`make ([a-z][a-z-]*)")
	// target is a rule in a makefile.
	target = regexp.MustCompile(`(?m)^([a-z][a-z-]*):`)
)

// TestReferencesExist reads every tracked document, template, script, makefile and Go comment
// and checks that each file, directory, link and make target it names exists.
func TestReferencesExist(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(t.Context(), "git", "-C", root, "ls-files").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v (the test reads the tracked files; run it in a git checkout)", err)
	}
	targets := map[string]bool{}
	for _, mk := range []string{"GNUmakefile", "scripts/make-fragment-testbed.mk"} {
		b, err := os.ReadFile(filepath.Join(root, mk))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range target.FindAllStringSubmatch(string(b), -1) {
			targets[m[1]] = true
		}
	}
	exists := func(dir, p string) bool {
		for _, base := range []string{root, dir} {
			matches, _ := filepath.Glob(filepath.Join(base, p))
			if len(matches) > 0 {
				return true
			}
		}
		return false
	}
	checked := 0
	for _, file := range strings.Fields(string(out)) {
		if !scanned(file) {
			continue
		}
		dir := filepath.Join(root, filepath.Dir(file))
		// tfplugindocs renders templates/<path>.tmpl as docs/<path>: their links are relative to that.
		linkDir := dir
		if rel, ok := strings.CutPrefix(file, "templates/"); ok {
			linkDir = filepath.Join(root, "docs", filepath.Dir(rel))
		}
		for n, line := range readLines(t, filepath.Join(root, file)) {
			if strings.HasSuffix(file, ".go") {
				i := strings.Index(line, "//")
				if i < 0 {
					continue
				}
				line = line[i:]
			}
			var refs, links []string
			if ext := filepath.Ext(file); ext == ".md" || ext == ".tmpl" {
				for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
					if target, _, _ := strings.Cut(m[1], "#"); target != "" && !strings.Contains(target, "://") && !strings.HasPrefix(target, "mailto:") {
						links = append(links, target)
					}
				}
			}
			for _, re := range []*regexp.Regexp{repoPath, quotedDir, topDoc} {
				for _, m := range re.FindAllStringSubmatchIndex(line, -1) {
					// "Terraform's internal/backend/…" is a path in another project's tree.
					if strings.HasSuffix(strings.TrimSpace(line[:m[2]]), "'s") {
						continue
					}
					refs = append(refs, line[m[2]:m[3]])
				}
			}
			seen := map[string]bool{}
			for _, p := range links {
				seen[p] = true
				checked++
				if !exists(linkDir, p) {
					t.Errorf("%s:%d links to %s, which does not exist", file, n+1, p)
				}
			}
			for _, p := range refs {
				if seen[p] {
					continue
				}
				seen[p] = true
				checked++
				if !exists(dir, p) {
					t.Errorf("%s:%d names %s, which does not exist", file, n+1, p)
				}
			}
			for _, m := range makeTarget.FindAllStringSubmatch(line, -1) {
				checked++
				if !targets[m[1]] {
					t.Errorf("%s:%d tells the reader to run `make %s`, which is no target of the GNUmakefile", file, n+1, m[1])
				}
			}
		}
	}
	t.Logf("checked %d references", checked)
	if checked < 50 {
		t.Errorf("checked only %d references; the patterns no longer match the documents", checked)
	}
}

// scanned reports whether a tracked file is read: documentation, templates, scripts, makefiles,
// CI and release configuration, and Go comments. Test fixtures and the test bed's components
// module (generated go.sum, upstream paths in comments) are not.
func scanned(file string) bool {
	if strings.Contains(file, "/testdata/") || strings.HasPrefix(file, "internal/testbed/components/") {
		return false
	}
	switch filepath.Ext(file) {
	case ".md", ".tmpl", ".go", ".sh", ".mk", ".yml", ".yaml", ".tf", ".env", ".txt":
		return true
	}
	return file == "GNUmakefile" || file == ".ci/run"
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return lines
}

// testName is a Go test named in prose: `TestSensitiveVariablesNeverReachTheLog`.
var testName = regexp.MustCompile(`\b(Test[A-Z][A-Za-z0-9_]*)\b`)

// TestNamedTestsExist checks that every test a document names as the proof of a claim (SECURITY.md
// names one per boundary) is a test function of the repository: a renamed or deleted test would
// otherwise leave the claim standing with nothing behind it.
func TestNamedTestsExist(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(t.Context(), "git", "-C", root, "ls-files").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v (the test reads the tracked files; run it in a git checkout)", err)
	}
	files := strings.Fields(string(out))
	defined := map[string]bool{}
	testFunc := regexp.MustCompile(`(?m)^func (Test[A-Za-z0-9_]*)\(`)
	for _, file := range files {
		if !strings.HasSuffix(file, "_test.go") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range testFunc.FindAllStringSubmatch(string(b), -1) {
			defined[m[1]] = true
		}
	}
	named := 0
	for _, file := range files {
		if ext := filepath.Ext(file); (ext != ".md" && ext != ".tmpl") || strings.Contains(file, "/testdata/") {
			continue
		}
		for n, line := range readLines(t, filepath.Join(root, file)) {
			for _, m := range testName.FindAllStringSubmatch(line, -1) {
				named++
				if !defined[m[1]] {
					t.Errorf("%s:%d names %s as a test, and no test function has that name", file, n+1, m[1])
				}
			}
		}
	}
	t.Logf("%d test names in documents, %d test functions", named, len(defined))
	if named < 20 {
		t.Errorf("found only %d test names in the documents; the pattern no longer matches them", named)
	}
}
