package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// resource describes a kind of registered object (runner, state storage) for the list, get,
// create, update and delete commands, which are the same for every kind.
type resource[T, In any] struct {
	kind, command string // "state storage", "state-storage"
	aliases       []string
	short         string
	list          func(context.Context, *session) ([]T, error)
	get           func(context.Context, *session, string) (*T, error)
	create        func(context.Context, *session, In) (*T, error)
	update        func(context.Context, *session, In) (*T, error)
	remove        func(context.Context, *session, string) error
	// id points at the input's id field.
	id func(*In) *string
	// adapter drops the fields of the object's shape that the input has not (status,
	// timestamps), so `get -o yaml` output can be edited and fed back to update, and translates
	// other tools' shapes.
	adapter docAdapter
	// complete finishes an input after decoding, with what the adapter translated (a runner's
	// state storage is created or found here); nil when there is nothing to finish.
	complete func(ctx context.Context, s *session, tr *translation, in *In) error
	// rows are the list table, header first; fields the get view.
	rows   func(now time.Time, items []T) [][]string
	fields func(now time.Time, item *T) [][2]string
	// example is a YAML body for the create help; removed says what delete did.
	example, removed string
}

func (r *resource[T, In]) listCmd() string { return "outpost " + r.command + " list" }

// notFound names the missing object and how to list the ones there are.
func (r *resource[T, In]) notFound(err error, s *session, id string) error {
	return notFound(err, r.kind, id, s.Org(), r.listCmd())
}

// group is the command of the kind, with its list, get, create, update and delete commands.
func (r *resource[T, In]) group(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: r.command, Aliases: r.aliases, Short: r.short, GroupID: "register", RunE: groupRun}
	cmd.AddCommand(r.listCommand(a), r.getCommand(a), r.createCommand(a), r.updateCommand(a), r.deleteCommand(a))
	return cmd
}

func (r *resource[T, In]) listCommand(a *app) *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   fmt.Sprintf("List the organisation's %ss", r.kind),
		Example: fmt.Sprintf("  outpost %s list\n  outpost %s list -o json | jq -r '.items[].id'", r.command, r.command),
		Args:    noArgs,
		RunE: a.run(func(ctx context.Context, s *session, _ []string) error {
			items, err := r.list(ctx, s)
			if err != nil {
				return err
			}
			return a.print(api.List[T]{Items: items}, func(w io.Writer) {
				if len(items) == 0 {
					fmt.Fprintf(w, "No %ss in org %s yet; register one with `outpost %s create -f FILE`.\n", r.kind, s.Org(), r.command)
					return
				}
				table(w, r.rows(a.env.Now(), items))
			})
		}),
	}
}

func (r *resource[T, In]) getCommand(a *app) *cobra.Command {
	return &cobra.Command{
		Use:               "get ID",
		Short:             fmt.Sprintf("Show a %s", r.kind),
		Example:           fmt.Sprintf("  outpost %s get ID\n  outpost %s get ID -o yaml > %s.yaml   # edit, then: outpost %s update ID -f %s.yaml", r.command, r.command, r.command, r.command, r.command),
		Args:              idArgs(1, 1, "the "+r.kind+"'s id", r.kind+" id"),
		ValidArgsFunction: a.completeIDs(r.ids),
		RunE: a.run(func(ctx context.Context, s *session, args []string) error {
			item, err := r.get(ctx, s, args[0])
			if err != nil {
				return r.notFound(err, s, args[0])
			}
			return a.print(item, func(w io.Writer) { details(w, r.fields(a.env.Now(), item)) })
		}),
	}
}

func (r *resource[T, In]) createCommand(a *app) *cobra.Command {
	var m manifest
	cmd := &cobra.Command{
		Use:   "create [ID] [-f FILE] [--set PATH=VALUE ...]",
		Short: fmt.Sprintf("Register a %s from a YAML or JSON file in the API's shape", r.kind),
		Long: fmt.Sprintf(`Register a %s. The body is the file given with -f (YAML or JSON in the API's shape, "-" for
stdin), then each --set PATH=VALUE: dotted paths name nested fields and list items
(job.namespace, public_keys.0), values take the field's type, and @FILE reads a value from a
file. An ID argument sets the id.

A file, e.g. %s.yaml:

%s`, r.kind, r.command, indent(r.example)),
		Example: fmt.Sprintf("  outpost %s create -f %s.yaml\n  outpost %s create -f %s.yaml --set id=eu-2 --set description='second cluster'",
			r.command, r.command, r.command, r.command),
		Args: idArgs(0, 1, "at most one id", r.kind+" id"),
		RunE: a.run(func(ctx context.Context, s *session, args []string) error {
			if m.file == "" && len(m.sets) == 0 {
				return &usageError{errors.New("nothing to create from: give -f FILE and/or --set PATH=VALUE")}
			}
			in, tr, err := r.input(a, m, nil, args)
			if err != nil {
				return err
			}
			if err := r.finish(ctx, a, s, m, tr, &in); err != nil {
				return err
			}
			out, err := r.create(ctx, s, in)
			if err != nil {
				if errors.Is(err, api.ErrConflict) {
					return fmt.Errorf("%s %s already exists in org %s; change it with `outpost %s update %s -f FILE`", r.kind, *r.id(&in), s.Org(), r.command, *r.id(&in))
				}
				return refused(err, m)
			}
			return a.print(out, func(w io.Writer) { fmt.Fprintf(w, "%s %s created in org %s\n", r.kind, *r.id(&in), s.Org()) })
		}),
	}
	m.register(cmd)
	return cmd
}

func (r *resource[T, In]) updateCommand(a *app) *cobra.Command {
	var m manifest
	cmd := &cobra.Command{
		Use:   "update ID [-f FILE] [--set PATH=VALUE ...]",
		Short: fmt.Sprintf("Change a %s (from a file, or --set on the %s as it is)", r.kind, r.kind),
		Long: fmt.Sprintf(`Change a %s. With -f the file replaces every field the API lets you set (what the file
leaves out takes its default), then --set applies. Without -f, --set changes the %s as it is
now and keeps everything else.`, r.kind, r.kind),
		Example: fmt.Sprintf("  outpost %s update ID -f %s.yaml\n  outpost %s update ID --set description='moved to eu-west-1'",
			r.command, r.command, r.command),
		Args:              idArgs(1, 1, "the "+r.kind+"'s id", r.kind+" id"),
		ValidArgsFunction: a.completeIDs(r.ids),
		RunE: a.run(func(ctx context.Context, s *session, args []string) error {
			if m.file == "" && len(m.sets) == 0 {
				return &usageError{errors.New("nothing to change: give -f FILE and/or --set PATH=VALUE")}
			}
			var base map[string]any
			if m.file == "" {
				cur, err := r.get(ctx, s, args[0])
				if err != nil {
					return r.notFound(err, s, args[0])
				}
				if base, err = asDoc(cur); err != nil {
					return err
				}
			}
			in, tr, err := r.input(a, m, base, args)
			if err != nil {
				return err
			}
			if err := r.finish(ctx, a, s, m, tr, &in); err != nil {
				return err
			}
			out, err := r.update(ctx, s, in)
			if err != nil {
				return refused(r.notFound(err, s, args[0]), m)
			}
			return a.print(out, func(w io.Writer) { fmt.Fprintf(w, "%s %s updated\n", r.kind, args[0]) })
		}),
	}
	m.register(cmd)
	return cmd
}

func (r *resource[T, In]) deleteCommand(a *app) *cobra.Command {
	return &cobra.Command{
		Use:               "delete ID...",
		Aliases:           []string{"rm"},
		Short:             fmt.Sprintf("Delete %ss", r.kind),
		Long:              fmt.Sprintf("Delete %ss. %s", r.kind, r.removed),
		Example:           fmt.Sprintf("  outpost %s delete ID", r.command),
		Args:              idArgs(1, -1, "the id of the "+r.kind+" to delete", r.kind+" id"),
		ValidArgsFunction: a.completeIDs(r.ids),
		RunE: a.run(func(ctx context.Context, s *session, args []string) error {
			for _, id := range args {
				if err := r.remove(ctx, s, id); err != nil {
					return r.notFound(err, s, id)
				}
				if !a.machine() {
					fmt.Fprintf(a.env.Stdout, "%s %s deleted\n", r.kind, id)
				}
			}
			return nil
		}),
	}
}

// input builds the request body and reconciles its id with the ID argument.
func (r *resource[T, In]) input(a *app, m manifest, base map[string]any, args []string) (In, *translation, error) {
	in, tr, err := readInput[In](a.env.Stdin, m, base, r.adapter)
	if err != nil {
		return in, nil, err
	}
	if len(args) == 1 {
		id := r.id(&in)
		if *id != "" && *id != args[0] {
			return in, nil, &usageError{fmt.Errorf("the id argument is %s but %s says id %s; give one of them", args[0], source(m.file), *id)}
		}
		*id = args[0]
	}
	if *r.id(&in) == "" {
		return in, nil, &usageError{fmt.Errorf("the %s has no id: add `id: NAME` to the file, an ID argument, or --set id=NAME", r.kind)}
	}
	if err := idProblem(r.kind+" id", *r.id(&in)); err != nil {
		return in, nil, err
	}
	return in, tr, nil
}

// finish completes the input (see complete) and says what was translated.
func (r *resource[T, In]) finish(ctx context.Context, a *app, s *session, m manifest, tr *translation, in *In) error {
	if tr == nil {
		tr = &translation{}
	}
	if r.complete != nil {
		if err := r.complete(ctx, s, tr, in); err != nil {
			return err
		}
	}
	a.printNotes(m.file, tr)
	return nil
}

func (r *resource[T, In]) ids(ctx context.Context, s *session) ([]string, error) {
	items, err := r.list(ctx, s)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(items))
	for i := range items {
		doc, err := asDoc(&items[i])
		if err != nil {
			return nil, err
		}
		id, _ := doc["id"].(string)
		out = append(out, id)
	}
	return out, nil
}

// refused words the orchestrator's refusal of a field of the body in terms of where it came from.
func refused(err error, m manifest) error {
	var e *api.Error
	if !errors.As(err, &e) || !errors.Is(err, api.ErrInvalid) || e.Field == "" {
		return err
	}
	where := "with --set " + e.Field + "=…"
	if m.file != "" {
		where = "in " + source(m.file) + ", or " + where
	}
	return fmt.Errorf("the orchestrator refused %s: %s\nFix it %s", e.Field, e.Message, where)
}

// asDoc turns an API object into its JSON document.
func asDoc(v any) (map[string]any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var doc map[string]any
	return doc, json.Unmarshal(b, &doc)
}

// dropKeys deletes read-only keys from a document.
func dropKeys(doc map[string]any, keys ...string) {
	for _, k := range keys {
		delete(doc, k)
	}
}
