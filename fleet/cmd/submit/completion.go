package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/runfleet/runfleet/fleet/internal/cli"
)

const completionUsage = `usage: submit completion bash|zsh|fish

Prints a script that completes submit's subcommands and each one's flags in that shell:
  bash:  source <(submit completion bash)      (or save it in ~/.local/share/bash-completion/completions/submit)
  zsh:   source <(submit completion zsh)       (bash's script, loaded through bashcompinit)
  fish:  submit completion fish > ~/.config/fish/completions/submit.fish
`

// completionCommand is `submit completion SHELL`.
func completionCommand(args []string, stdout, stderr io.Writer) int {
	if len(args) == 1 && (args[0] == "--help" || args[0] == "-help" || args[0] == "-h") {
		fmt.Fprint(stdout, completionUsage)
		return 0
	}
	if len(args) != 1 {
		return usageFailed(stderr, errors.New("usage: submit completion bash|zsh|fish"))
	}
	switch args[0] {
	case "bash":
		fmt.Fprint(stdout, bashCompletion())
	case "zsh":
		fmt.Fprint(stdout, "autoload -U +X bashcompinit && bashcompinit\n"+bashCompletion())
	case "fish":
		fmt.Fprint(stdout, fishCompletion())
	default:
		return usageFailed(stderr, fmt.Errorf("completion %q: want bash, zsh or fish", args[0]))
	}
	return 0
}

// completed are the command lines whose flags are completed, and the words that may follow
// each (its subcommands).
var completed = []struct {
	words string // after submit
	next  string
}{
	{"", strings.Join(subcommands, " ")},
	{"watch", ""}, {"cancel", ""}, {"workers", ""}, {"bench", ""}, {"artifacts", ""}, {"jobs", ""},
	{"show", ""}, {"redrive", ""}, {"tenant", "set show key"}, {"tenant set", ""}, {"tenant show", ""},
	{"tenant key", "add"}, {"tenant key add", ""}, {"queue", "add list remove"}, {"queue add", ""},
	{"queue list", ""}, {"queue remove", ""}, {"completion", "bash zsh fish"},
}

// flagHelp is a flag of a usage: its name and the first line of what it does.
type flagHelp struct{ name, usage string }

// flagsOf reads the flags of `submit words --help`, so that a completion lists exactly the flags
// the command takes.
func flagsOf(words string) []flagHelp {
	if words == "tenant" || words == "tenant key" || words == "completion" {
		return nil
	}
	var out bytes.Buffer
	run(nil, append(strings.Fields(words), "--help"), func(string) string { return "" }, nil, &out, io.Discard)
	var flags []flagHelp
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		line := sc.Text()
		if name, ok := strings.CutPrefix(line, "  --"); ok {
			name, _, _ = strings.Cut(name, " ")
			flags = append(flags, flagHelp{name: name})
		} else if n := len(flags); n > 0 && flags[n-1].usage == "" && strings.HasPrefix(line, "        ") {
			flags[n-1].usage = strings.TrimSpace(line)
		}
	}
	return flags
}

func bashCompletion() string {
	var b strings.Builder
	b.WriteString(`# bash completion for submit: source <(submit completion bash)
_submit() {
	local cur=${COMP_WORDS[COMP_CWORD]} sub= w i words
	for ((i = 1; i < COMP_CWORD; i++)); do
		w=${COMP_WORDS[i]}
		case "$sub:$w" in
`)
	for _, c := range completed {
		for _, next := range strings.Fields(c.next) {
			fmt.Fprintf(&b, "\t\t%q) sub=%q ;;\n", c.words+":"+next, strings.TrimSpace(c.words+" "+next))
		}
	}
	b.WriteString("\t\tesac\n\tdone\n\tcase \"$sub:$cur\" in\n")
	for _, c := range completed {
		var names []string
		for _, f := range flagsOf(c.words) {
			names = append(names, "--"+f.name)
		}
		fmt.Fprintf(&b, "\t%q*) words=%q ;;\n", c.words+":-", strings.Join(names, " "))
		fmt.Fprintf(&b, "\t%q*) words=%q ;;\n", c.words+":", c.next)
	}
	b.WriteString(`	esac
	COMPREPLY=($(compgen -W "$words" -- "$cur"))
}
complete -o default -F _submit submit
`)
	return b.String()
}

func fishCompletion() string {
	var b strings.Builder
	b.WriteString("# fish completion for submit: submit completion fish > ~/.config/fish/completions/submit.fish\n")
	b.WriteString("complete -c submit -e\n")
	for _, c := range completed {
		cond := "__fish_use_subcommand"
		if c.words != "" {
			var seen []string
			for _, w := range strings.Fields(c.words) {
				seen = append(seen, "__fish_seen_subcommand_from "+w)
			}
			cond = strings.Join(seen, "; and ")
			if c.next != "" {
				cond += "; and not __fish_seen_subcommand_from " + c.next
			}
		}
		if c.next != "" {
			fmt.Fprintf(&b, "complete -c submit -f -n %s -a %s\n", fishQuote(cond), fishQuote(c.next))
		}
		for _, f := range flagsOf(c.words) {
			fmt.Fprintf(&b, "complete -c submit -n %s -l %s -d %s\n", fishQuote(cond), f.name, fishQuote(f.usage))
		}
	}
	return b.String()
}

// fishQuote quotes s for fish: in single quotes, only \ and ' are special.
func fishQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// usageFailed reports a command line submit cannot read in one line, with the hint, and returns
// the exit code of usage errors.
func usageFailed(stderr io.Writer, err error) int {
	cli.Fail(stderr, "submit", err)
	return exitUsage
}
