package sourcearchive

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Ignore files: the directory's own say in what is packed. .outpostignore is read when present,
// else .terraformignore (the HCP Terraform convention, so a directory prepared for it needs no
// second file); both have .gitignore syntax. Only the file at the top of the directory counts.
const (
	OutpostIgnoreFile   = ".outpostignore"
	TerraformIgnoreFile = ".terraformignore"
)

// ignoreRules are the rules of one ignore file, in file order: the last rule that matches a path
// decides.
type ignoreRules struct {
	file  string
	rules []ignoreRule
}

type ignoreRule struct {
	re      *regexp.Regexp
	negate  bool
	dirOnly bool
}

// readIgnoreFile reads the ignore file of root: .outpostignore, else .terraformignore, else none
// (nil rules).
func readIgnoreFile(root string) (*ignoreRules, error) {
	for _, name := range []string{OutpostIgnoreFile, TerraformIgnoreFile} {
		data, err := os.ReadFile(filepath.Join(root, name))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", name, err)
		}
		return parseIgnore(name, data)
	}
	return nil, nil
}

// parseIgnore reads rules in .gitignore syntax (gitignore(5)): blank lines and lines starting
// with # are skipped, a leading ! negates, a trailing / matches directories only, a / at the
// start or in the middle anchors the pattern at the top of the directory (otherwise it matches
// at any depth), * and ? match within one path segment, [] is a character class, **/ at the
// start, /** at the end and /**/ in the middle match any number of directories, and a backslash
// makes the next character literal.
func parseIgnore(file string, data []byte) (*ignoreRules, error) {
	r := &ignoreRules{file: file}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSuffix(sc.Text(), "\r")
		line = trimTrailingSpaces(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		var rule ignoreRule
		if strings.HasPrefix(line, "!") {
			rule.negate = true
			line = line[1:]
		}
		if strings.HasSuffix(line, "/") && !strings.HasSuffix(line, `\/`) {
			rule.dirOnly = true
			line = strings.TrimRight(line, "/")
		}
		if line == "" {
			continue
		}
		anchored := strings.Contains(line, "/")
		line = strings.TrimPrefix(line, "/")
		expr := ignoreRegexp(line)
		if !anchored {
			expr = "(?:.*/)?" + expr
		}
		re, err := regexp.Compile("^" + expr + "$")
		if err != nil {
			return nil, fmt.Errorf("%s line %d: pattern %q: %w", file, n, sc.Text(), err)
		}
		rule.re = re
		r.rules = append(r.rules, rule)
	}
	return r, sc.Err()
}

// trimTrailingSpaces drops trailing spaces unless a backslash escapes them.
func trimTrailingSpaces(s string) string {
	for strings.HasSuffix(s, " ") && !strings.HasSuffix(s, `\ `) {
		s = s[:len(s)-1]
	}
	return s
}

// ignoreRegexp translates one pattern (without its !, trailing / and leading /) into a regular
// expression over slash-separated relative paths.
func ignoreRegexp(p string) string {
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '*' && strings.HasPrefix(p[i:], "**") && (i == 0 || p[i-1] == '/') && (i+2 == len(p) || p[i+2] == '/'):
			// A whole segment of **: any number of directories.
			switch {
			case i+2 == len(p) && i == 0: // "**": everything
				b.WriteString(".*")
			case i+2 == len(p): // "a/**": everything inside a
				b.WriteString(".*")
			default: // "**/b" or "a/**/b": zero or more directories
				b.WriteString("(?:.*/)?")
				i++ // the slash after ** is part of the group
			}
			i++
		case c == '*':
			for i+1 < len(p) && p[i+1] == '*' {
				i++ // other runs of asterisks are one asterisk
			}
			b.WriteString("[^/]*")
		case c == '?':
			b.WriteString("[^/]")
		case c == '[':
			end := classEnd(p, i)
			if end < 0 {
				b.WriteString(regexp.QuoteMeta("["))
				continue
			}
			class := p[i+1 : end]
			b.WriteString("[")
			if strings.HasPrefix(class, "!") || strings.HasPrefix(class, "^") {
				b.WriteString("^/")
				class = class[1:]
			}
			for j := 0; j < len(class); j++ {
				switch ch := class[j]; {
				case ch == '\\' && j+1 < len(class):
					j++
					b.WriteString(regexp.QuoteMeta(string(class[j])))
				case ch == '-':
					b.WriteByte('-')
				default:
					b.WriteString(regexp.QuoteMeta(string(ch)))
				}
			}
			b.WriteString("]")
			i = end
		case c == '\\' && i+1 < len(p):
			i++
			b.WriteString(regexp.QuoteMeta(string(p[i])))
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	return b.String()
}

// classEnd is the index of the ] that closes the character class opening at p[i], or -1.
func classEnd(p string, i int) int {
	j := i + 1
	if j < len(p) && (p[j] == '!' || p[j] == '^') {
		j++
	}
	if j < len(p) && p[j] == ']' { // a ] first in the class is a member
		j++
	}
	for ; j < len(p); j++ {
		switch p[j] {
		case '\\':
			j++
		case ']':
			return j
		}
	}
	return -1
}

// ignored reports whether the rules leave out name (slash separated, relative to the top), a
// directory when dir is set.
func (r *ignoreRules) ignored(name string, dir bool) bool {
	if r == nil {
		return false
	}
	out := false
	for _, rule := range r.rules {
		if rule.dirOnly && !dir {
			continue
		}
		if rule.re.MatchString(name) {
			out = !rule.negate
		}
	}
	return out
}
