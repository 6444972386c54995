// Package docrefs has no code: its test checks that what the repository's documents and code
// comments point at exists (files, directories, links, make targets), so a rename or a removal
// cannot leave a reader following a path to nothing.
package docrefs
