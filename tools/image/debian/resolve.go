package debian

import (
	"bufio"
	"fmt"
	"slices"
	"strings"
)

// alternative is one way to satisfy a dependency: a real package, or a virtual one with the
// packages that provide it.
type alternative struct {
	name      string
	virtual   bool
	providers []string
}

// group is one dependency of a package: any of its alternatives satisfies it.
type group []alternative

// parseDepends parses `apt-cache depends` output (Depends and PreDepends only):
//
//	git
//	  Depends: libc6
//	 |Depends: debconf
//	  Depends: <debconf-2.0>
//	    cdebconf
//	    debconf
//
// A line starting " |" joins the next dependency to the same group; "<name>" is a virtual
// package whose providers follow, indented by four.
func parseDepends(out string) (map[string][]group, error) {
	deps := map[string][]group{}
	var (
		pkg   string
		cur   group
		open  bool // the last dependency line started with " |"
		inAlt bool // provider lines may follow the last alternative
	)
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			continue
		case !strings.HasPrefix(line, " "):
			if open {
				return nil, fmt.Errorf("apt-cache depends: %s ends inside an alternative", pkg)
			}
			pkg, cur, inAlt = line, nil, false
			deps[pkg] = nil
		case strings.HasPrefix(line, "    "):
			if !inAlt || len(cur) == 0 && len(deps[pkg]) == 0 {
				return nil, fmt.Errorf("apt-cache depends: provider line %q outside a virtual dependency", line)
			}
			last := lastAlt(deps, pkg, cur, open)
			last.providers = append(last.providers, strings.TrimSpace(line))
		default:
			kind, target, ok := strings.Cut(strings.TrimSpace(strings.TrimPrefix(line, " |")), ": ")
			if !ok || (kind != "Depends" && kind != "PreDepends") {
				return nil, fmt.Errorf("apt-cache depends: unexpected line %q", line)
			}
			alt := alternative{name: strings.TrimSuffix(target, ":any")}
			if strings.HasPrefix(alt.name, "<") && strings.HasSuffix(alt.name, ">") {
				alt.name, alt.virtual = strings.Trim(alt.name, "<>"), true
			}
			cur = append(cur, alt)
			inAlt = true
			open = strings.HasPrefix(line, " |")
			if !open {
				deps[pkg] = append(deps[pkg], cur)
				cur = nil
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if open {
		return nil, fmt.Errorf("apt-cache depends: output ends inside an alternative")
	}
	return deps, nil
}

// lastAlt returns the alternative that provider lines belong to: the last one added, whether its
// group is still open or already closed.
func lastAlt(deps map[string][]group, pkg string, cur group, open bool) *alternative {
	if open || len(cur) > 0 {
		return &cur[len(cur)-1]
	}
	gs := deps[pkg]
	g := gs[len(gs)-1]
	return &g[len(g)-1]
}

// resolve returns the sorted closure of roots under Depends and Pre-Depends. A dependency is
// satisfied by a package already chosen, by an alternative named in exclude (a package the image
// leaves out on purpose), or else by its first real alternative. A dependency that only virtual
// packages can satisfy is an error naming the providers, so that the choice is made in the
// request, not by chance.
func resolve(roots []string, exclude map[string]string, depends func(names []string) (map[string][]group, error)) ([]string, error) {
	chosen := map[string]bool{}
	var todo []string
	for _, r := range roots {
		if _, ok := exclude[r]; ok {
			return nil, fmt.Errorf("package %s is both requested and excluded", r)
		}
		if !chosen[r] {
			chosen[r] = true
			todo = append(todo, r)
		}
	}
	for len(todo) > 0 {
		deps, err := depends(todo)
		if err != nil {
			return nil, err
		}
		var next []string
		for _, pkg := range todo {
			groups, ok := deps[pkg]
			if !ok {
				return nil, fmt.Errorf("apt-cache depends said nothing about %s", pkg)
			}
			for _, g := range groups {
				pick, err := choose(pkg, g, chosen, exclude)
				if err != nil {
					return nil, err
				}
				if pick != "" && !chosen[pick] {
					chosen[pick] = true
					next = append(next, pick)
				}
			}
		}
		todo = next
	}
	out := make([]string, 0, len(chosen))
	for p := range chosen {
		out = append(out, p)
	}
	slices.Sort(out)
	return out, nil
}

// choose returns the package that satisfies g, or "" when g is already satisfied or excluded.
func choose(pkg string, g group, chosen map[string]bool, exclude map[string]string) (string, error) {
	for _, a := range g {
		if _, ok := exclude[a.name]; ok {
			return "", nil
		}
		if chosen[a.name] || slices.ContainsFunc(a.providers, func(p string) bool { return chosen[p] }) {
			return "", nil
		}
	}
	for _, a := range g {
		if !a.virtual {
			return a.name, nil
		}
	}
	var names, providers []string
	for _, a := range g {
		names = append(names, a.name)
		providers = append(providers, a.providers...)
	}
	return "", fmt.Errorf("%s depends on %s, which only virtual packages satisfy (provided by %s): request one of the providers or exclude it",
		pkg, strings.Join(names, " | "), strings.Join(providers, ", "))
}
