package chart

import "io/fs"

// Files returns the chart's files as they are embedded, rooted at the chart directory, so the
// tests (package chart_test) can read the raw chart.
func Files() fs.FS { return files }
