// Package release is what the release build (.goreleaser.yml) needs beyond building and
// archiving: SPDX software bills of materials for the archives and the container images, the
// agent chart packaged with the release version, pushing the images and the chart to an OCI
// registry, and signing what was pushed with cosign (Sign). It is driven by tools/cmd/outpost-release.
package release

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"time"
)

// The SPDX 2.3 JSON shapes a bill of materials uses here. Only what is known is stated; the
// rest says NOASSERTION, as the specification asks, rather than guessing licences.

// Document is an SPDX 2.3 document.
type Document struct {
	SPDXVersion       string         `json:"spdxVersion"`
	DataLicense       string         `json:"dataLicense"`
	SPDXID            string         `json:"SPDXID"`
	Name              string         `json:"name"`
	DocumentNamespace string         `json:"documentNamespace"`
	CreationInfo      CreationInfo   `json:"creationInfo"`
	Packages          []Package      `json:"packages"`
	Relationships     []Relationship `json:"relationships"`
}

// CreationInfo says who made the document and when.
type CreationInfo struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

// Package is one component: the artifact itself, a program in it, a Go module or a Debian
// package.
type Package struct {
	Name             string        `json:"name"`
	SPDXID           string        `json:"SPDXID"`
	VersionInfo      string        `json:"versionInfo,omitempty"`
	Supplier         string        `json:"supplier,omitempty"`
	DownloadLocation string        `json:"downloadLocation"`
	FilesAnalyzed    bool          `json:"filesAnalyzed"`
	Checksums        []Checksum    `json:"checksums,omitempty"`
	LicenseConcluded string        `json:"licenseConcluded"`
	LicenseDeclared  string        `json:"licenseDeclared"`
	CopyrightText    string        `json:"copyrightText"`
	PrimaryPurpose   string        `json:"primaryPackagePurpose,omitempty"`
	Comment          string        `json:"comment,omitempty"`
	ExternalRefs     []ExternalRef `json:"externalRefs,omitempty"`
}

// Checksum is a digest of a package's file.
type Checksum struct {
	Algorithm string `json:"algorithm"`
	Value     string `json:"checksumValue"`
}

// ExternalRef is a package URL (purl) of a package.
type ExternalRef struct {
	Category string `json:"referenceCategory"`
	Type     string `json:"referenceType"`
	Locator  string `json:"referenceLocator"`
}

// Relationship links two elements: DESCRIBES, CONTAINS, DEPENDS_ON.
type Relationship struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}

const noAssertion = "NOASSERTION"

// Creator names this tool in every document's creationInfo.
const Creator = "Tool: outpost-release"

// namespaceBase prefixes the unique documentNamespace of every document.
const namespaceBase = "https://github.com/outpost-dev/terraform-provider-outpost/spdx/"

// bom collects the packages and relationships of one document, with unique SPDX ids.
type bom struct {
	doc  Document
	used map[string]int
	// byPurl finds a package already added, so a module two programs share is listed once.
	byPurl map[string]string
}

// newBOM starts a document about one subject (an archive, an image); the root package is
// returned with the id the document DESCRIBES. digest makes the namespace unique per content.
func newBOM(name, digest string, created time.Time, root Package) (*bom, string) {
	b := &bom{used: map[string]int{}, byPurl: map[string]string{}, doc: Document{
		SPDXVersion: "SPDX-2.3", DataLicense: "CC0-1.0", SPDXID: "SPDXRef-DOCUMENT", Name: name,
		DocumentNamespace: namespaceBase + url.PathEscape(name) + "-" + strings.TrimPrefix(digest, "sha256:"),
		CreationInfo:      CreationInfo{Created: created.UTC().Format(time.RFC3339), Creators: []string{Creator}},
		Packages:          []Package{}, Relationships: []Relationship{},
	}}
	id := b.add(root)
	b.relate("SPDXRef-DOCUMENT", "DESCRIBES", id)
	return b, id
}

var idUnsafe = regexp.MustCompile(`[^A-Za-z0-9.-]+`)

// add adds a package, filling the fields SPDX requires, and returns its id. A package with the
// package URL of one added before is that package.
func (b *bom) add(p Package) string {
	purl := ""
	if len(p.ExternalRefs) > 0 {
		purl = p.ExternalRefs[0].Locator
		if id, ok := b.byPurl[purl]; ok {
			return id
		}
	}
	base := "SPDXRef-Package-" + strings.Trim(idUnsafe.ReplaceAllString(p.Name+"-"+p.VersionInfo, "-"), "-")
	b.used[base]++
	p.SPDXID = base
	if n := b.used[base]; n > 1 {
		p.SPDXID = fmt.Sprintf("%s-%d", base, n)
	}
	for _, f := range []*string{&p.DownloadLocation, &p.LicenseConcluded, &p.LicenseDeclared, &p.CopyrightText} {
		if *f == "" {
			*f = noAssertion
		}
	}
	b.doc.Packages = append(b.doc.Packages, p)
	if purl != "" {
		b.byPurl[purl] = p.SPDXID
	}
	return p.SPDXID
}

func (b *bom) relate(from, typ, to string) {
	b.doc.Relationships = append(b.doc.Relationships, Relationship{Element: from, Type: typ, Related: to})
}

// write writes the document as indented JSON.
func (b *bom) write(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(b.doc)
}

func purlRef(purl string) []ExternalRef {
	return []ExternalRef{{Category: "PACKAGE-MANAGER", Type: "purl", Locator: purl}}
}

// purlVersion escapes a version for a package URL ("1:2.39.5-0+deb12u2" keeps no raw ':' or '+').
func purlVersion(v string) string {
	return strings.NewReplacer(":", "%3A", "+", "%2B").Replace(url.PathEscape(v))
}

// sha256Hex is the hex SHA-256 of data.
func sha256Hex(data []byte) string {
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:])
}

// sortedKeys returns the keys of m in order, so documents are the same for the same input.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
