package console

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"net/http"
	"strings"
)

//go:embed templates/*.html
var templateFiles embed.FS

// pageData is what every page's template gets: the layout's fields and the page's own Body.
type pageData struct {
	Title   string
	Message string
	// Org is the session's organisation (empty on the sign-in page: no navigation).
	Org   string
	Admin bool
	CSRF  string
	// Nav names the navigation entry of the page.
	Nav  string
	Next string
	Body any
}

// pageTemplates holds one template set per page (the layout plus the page's file), so each page
// defines its own "content".
type pageTemplates struct {
	sets map[string]*template.Template
}

var pageFiles = map[string]string{
	"error": "error.html", "signin": "signin.html", "runners": "runners.html", "deployments": "deployments.html",
	"deployment": "deployment.html", "tokens": "tokens.html", "state-keys": "statekeys.html",
	"connect": "connect.html",
}

func parseTemplates() (*pageTemplates, error) {
	p := &pageTemplates{sets: map[string]*template.Template{}}
	for name, file := range pageFiles {
		t, err := template.New(name).ParseFS(templateFiles, "templates/layout.html", "templates/"+file)
		if err != nil {
			return nil, fmt.Errorf("console: parse template %s: %w", file, err)
		}
		p.sets[name] = t
	}
	return p, nil
}

// render writes a whole page; a template that fails leaves a plain 500 (the buffer keeps a half
// page from reaching the browser).
func (c *Console) render(w http.ResponseWriter, status int, page string, d pageData) {
	var buf bytes.Buffer
	if err := c.pages.sets[page].ExecuteTemplate(&buf, "layout", d); err != nil {
		c.cfg.Logger.Error("console template failed", "page", page, "err", err)
		http.Error(w, "the console failed to render this page; the orchestrator log has the details", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// fragment renders one named template of a page's set (the part a live stream replaces).
func (c *Console) fragment(page, name string, data any) (string, error) {
	var b strings.Builder
	if err := c.pages.sets[page].ExecuteTemplate(&b, name, data); err != nil {
		return "", fmt.Errorf("console: render %s of %s: %w", name, page, err)
	}
	return b.String(), nil
}

// pageOf fills the layout's fields of a page of v's session.
func pageOf(v *visit, title, nav string, body any) pageData {
	return pageData{Title: title, Org: v.org, Admin: v.sess.Admin, CSRF: v.csrf, Nav: nav, Body: body}
}
