package recipe

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// SourceFacts are what the labels say about the source tree the images are built from.
type SourceFacts struct {
	// Revision is the commit at HEAD ("" outside a git checkout).
	Revision string
	// Dirty says the tree has changes that are not committed: the images then hold them, and
	// the revision label names the commit they sit on.
	Dirty bool
	// Created is SOURCE_DATE_EPOCH when set, else the commit time of HEAD, else the Unix epoch:
	// never the clock, so building twice gives the same digests.
	Created time.Time
	// Licenses is the SPDX identifier of the LICENSE file, or NOASSERTION when there is none or
	// it is not recognised.
	Licenses string
	// Warnings say what could not be found.
	Warnings []string
}

// DescribeSource reads the facts of the tree at root. getenv supplies SOURCE_DATE_EPOCH.
func DescribeSource(ctx context.Context, root string, getenv func(string) string) (SourceFacts, error) {
	var f SourceFacts
	git := func(args ...string) (string, error) {
		out, err := exec.CommandContext(ctx, "git", append([]string{"-C", root}, args...)...).Output()
		return strings.TrimSpace(string(out)), err
	}
	rev, err := git("rev-parse", "HEAD")
	if err == nil {
		f.Revision = rev
		if st, err := git("status", "--porcelain", "--untracked-files=no"); err == nil && st != "" {
			f.Dirty = true
			f.Warnings = append(f.Warnings, "the tree has uncommitted changes: the images hold them, and their revision label names "+shortRev(rev))
		}
	} else {
		f.Warnings = append(f.Warnings, "not a git checkout: no revision label")
	}
	switch sde := getenv("SOURCE_DATE_EPOCH"); {
	case sde != "":
		secs, err := strconv.ParseInt(sde, 10, 64)
		if err != nil || secs < 0 {
			return f, fmt.Errorf("SOURCE_DATE_EPOCH=%q is not a number of seconds since 1970", sde)
		}
		f.Created = time.Unix(secs, 0).UTC()
	case f.Revision != "":
		out, err := git("log", "-1", "--format=%ct", "HEAD")
		secs, perr := strconv.ParseInt(out, 10, 64)
		if err != nil || perr != nil {
			return f, fmt.Errorf("reading the commit time of HEAD: %w", errors.Join(err, perr))
		}
		f.Created = time.Unix(secs, 0).UTC()
	default:
		f.Created = time.Unix(0, 0).UTC()
	}
	f.Licenses = detectLicense(root)
	if f.Licenses == "NOASSERTION" {
		f.Warnings = append(f.Warnings, "no recognised LICENSE file at the repository root: the agent image's licenses label says NOASSERTION")
	}
	return f, nil
}

func shortRev(rev string) string {
	if len(rev) > 12 {
		return rev[:12]
	}
	return rev
}

// detectLicense recognises the licence texts a project like this would carry.
func detectLicense(root string) string {
	for _, name := range []string{"LICENSE", "LICENSE.txt", "LICENSE.md", "COPYING"} {
		b, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			continue
		}
		head := b[:min(len(b), 2000)]
		switch {
		case bytes.Contains(head, []byte("Mozilla Public License Version 2.0")) || bytes.Contains(head, []byte("Mozilla Public License, version 2.0")):
			return "MPL-2.0"
		case bytes.Contains(head, []byte("Apache License")) && bytes.Contains(head, []byte("Version 2.0")):
			return "Apache-2.0"
		case bytes.Contains(head, []byte("MIT License")) || bytes.Contains(head, []byte("Permission is hereby granted, free of charge")):
			return "MIT"
		}
	}
	return "NOASSERTION"
}

// VersionsEnv reads one NAME=value of the tree's scripts/versions.env, the one place tool
// versions live (the GNUmakefile includes it), e.g. TOFU_VERSION for the job image.
func VersionsEnv(root, name string) (string, error) {
	b, err := os.ReadFile(filepath.Join(root, "scripts", "versions.env"))
	if err != nil {
		return "", err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+"="); ok {
			return strings.TrimSpace(v), nil
		}
	}
	return "", fmt.Errorf("scripts/versions.env has no %s", name)
}
