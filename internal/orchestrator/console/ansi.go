package console

import (
	"html"
	"strconv"
	"strings"
)

// ansiHTML turns terminal output into HTML for a <pre>: the text escaped, SGR colour and bold
// sequences as <span class="ansi-…"> (styled by console.css, so the CSP needs no inline styles),
// every other escape sequence (CSI, OSC) dropped. Each call starts with no attributes set: a log
// chunk begins at a line, and Terraform resets its colours by the end of each line.
func ansiHTML(s string) string {
	var b strings.Builder
	var classes []string
	open := "" // the classes of the span written and not closed yet
	want := "" // the classes the next text is to have
	text := func(t string) {
		if t == "" {
			return
		}
		if open != want {
			if open != "" {
				b.WriteString("</span>")
			}
			if want != "" {
				b.WriteString(`<span class="` + want + `">`)
			}
			open = want
		}
		b.WriteString(html.EscapeString(t))
	}
	for len(s) > 0 {
		i := strings.IndexByte(s, 0x1b)
		if i < 0 {
			text(s)
			break
		}
		text(s[:i])
		s = s[i+1:]
		if len(s) > 0 && s[0] == ']' {
			// OSC (a window title, a hyperlink): dropped up to its BEL or ST.
			end := strings.IndexAny(s, "\x07\x1b")
			if end < 0 {
				break
			}
			s = strings.TrimPrefix(s[end+1:], "\\")
			continue
		}
		if len(s) == 0 || s[0] != '[' {
			continue // a lone ESC or another kind of sequence: the ESC is dropped
		}
		// CSI: parameters, then one final byte in 0x40–0x7e.
		end := 1
		for end < len(s) && (s[end] < 0x40 || s[end] > 0x7e) {
			end++
		}
		if end == len(s) {
			break // cut off at the end of the chunk
		}
		params, final := s[1:end], s[end]
		s = s[end+1:]
		if final == 'm' {
			classes = applySGR(classes, params)
			want = strings.Join(classes, " ")
		}
	}
	if open != "" {
		b.WriteString("</span>")
	}
	return b.String()
}

// applySGR applies one SGR sequence's parameters to the set of classes.
func applySGR(classes []string, params string) []string {
	if params == "" {
		return nil
	}
	for _, p := range strings.Split(params, ";") {
		n, err := strconv.Atoi(p)
		if err != nil {
			continue
		}
		switch {
		case n == 0:
			classes = nil
		case n == 1:
			classes = setClass(classes, "ansi-bold", "ansi-bold")
		case n == 22:
			classes = setClass(classes, "ansi-bold", "")
		case (n >= 30 && n <= 37) || (n >= 90 && n <= 97):
			classes = setClass(classes, "ansi-fg-", "ansi-fg-"+strconv.Itoa(n))
		case n == 39:
			classes = setClass(classes, "ansi-fg-", "")
		case (n >= 40 && n <= 47) || (n >= 100 && n <= 107):
			classes = setClass(classes, "ansi-bg-", "ansi-bg-"+strconv.Itoa(n))
		case n == 49:
			classes = setClass(classes, "ansi-bg-", "")
		}
	}
	return classes
}

// setClass replaces the class starting with prefix by class (none when class is empty).
func setClass(classes []string, prefix, class string) []string {
	out := classes[:0:0]
	for _, c := range classes {
		if !strings.HasPrefix(c, prefix) {
			out = append(out, c)
		}
	}
	if class != "" {
		out = append(out, class)
	}
	return out
}
