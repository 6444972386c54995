package console

import "testing"

func TestANSIHTML(t *testing.T) {
	for in, want := range map[string]string{
		"plain <b>&</b>\n": "plain &lt;b&gt;&amp;&lt;/b&gt;\n",
		"\x1b[0m\x1b[1m\x1b[32mApply complete!\x1b[0m\n":        `<span class="ansi-bold ansi-fg-32">Apply complete!</span>` + "\n",
		"\x1b[31mred\x1b[1m bold red\x1b[39m bold\x1b[0m plain": `<span class="ansi-fg-31">red</span><span class="ansi-fg-31 ansi-bold"> bold red</span><span class="ansi-bold"> bold</span> plain`,
		"\x1b[2Kcleared \x1b]0;title\x07x":                      "cleared x",
		"cut \x1b[3":                                            "cut ",
	} {
		if got := ansiHTML(in); got != want {
			t.Errorf("ansiHTML(%q) = %q, want %q", in, got, want)
		}
	}
}
