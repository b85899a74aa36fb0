package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"sigs.k8s.io/yaml"

	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
)

// fleetName accepts "arena" or "fleets/arena".
func fleetName(s string) string {
	if strings.HasPrefix(s, "fleets/") {
		return s
	}
	return "fleets/" + s
}

func (c *cli) fleetsCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "fleets", Aliases: []string{"fleet"}, Short: "Create, list, scale and delete fleets"}
	var file, name string
	create := &cobra.Command{
		Use:   "create -f FILE [--name ID]",
		Short: "Create a fleet from a YAML or JSON file (the REST shape; - for stdin)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fleet, id, err := readFleet(file, cmd.InOrStdin())
			if err != nil {
				return err
			}
			if name != "" {
				id = strings.TrimPrefix(name, "fleets/")
			}
			if id == "" {
				return fmt.Errorf("the fleet needs an id: --name, or a name field in %s", file)
			}
			api, err := c.fleets()
			if err != nil {
				return err
			}
			ctx, cancel := c.call(cmd.Context())
			defer cancel()
			got, err := api.CreateFleet(ctx, &tetherv1.CreateFleetRequest{FleetId: id, Fleet: fleet})
			if err != nil {
				return fmt.Errorf("create: %w", err)
			}
			return c.printFleets(got)
		},
	}
	create.Flags().StringVarP(&file, "file", "f", "", "fleet file (YAML or JSON; - for stdin)")
	create.Flags().StringVar(&name, "name", "", "fleet id (overrides the file's name)")
	_ = create.MarkFlagRequired("file") // the flag exists; the error is impossible

	list := &cobra.Command{
		Use: "list", Short: "List fleets", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			api, err := c.fleets()
			if err != nil {
				return err
			}
			resp := &tetherv1.ListFleetsResponse{}
			token := ""
			for {
				ctx, cancel := c.call(cmd.Context())
				page, err := api.ListFleets(ctx, &tetherv1.ListFleetsRequest{PageSize: 1000, PageToken: token})
				cancel()
				if err != nil {
					return fmt.Errorf("list: %w", err)
				}
				resp.Fleets = append(resp.Fleets, page.GetFleets()...)
				if token = page.GetNextPageToken(); token == "" {
					break
				}
			}
			return c.render(resp, func(w *tabwriter.Writer) { fleetTable(w, resp.GetFleets()...) })
		},
	}
	get := &cobra.Command{
		Use: "get NAME", Short: "Show a fleet", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			api, err := c.fleets()
			if err != nil {
				return err
			}
			ctx, cancel := c.call(cmd.Context())
			defer cancel()
			f, err := api.GetFleet(ctx, &tetherv1.GetFleetRequest{Name: fleetName(args[0])})
			if err != nil {
				return fmt.Errorf("get: %w", err)
			}
			return c.printFleets(f)
		},
	}
	scale := &cobra.Command{
		Use: "scale NAME REPLICAS", Short: "Set a fleet's replica count", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := strconv.Atoi(args[1])
			if err != nil {
				return fmt.Errorf("replicas %q is not a number", args[1])
			}
			api, err := c.fleets()
			if err != nil {
				return err
			}
			ctx, cancel := c.call(cmd.Context())
			defer cancel()
			f, err := api.UpdateFleet(ctx, &tetherv1.UpdateFleetRequest{
				Fleet: &tetherv1.Fleet{Name: fleetName(args[0]), Replicas: int32(n)}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"replicas"}},
			})
			if err != nil {
				return fmt.Errorf("scale: %w", err)
			}
			return c.printFleets(f)
		},
	}
	del := &cobra.Command{
		Use: "delete NAME", Short: "Delete a fleet (its game servers are shut down)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			api, err := c.fleets()
			if err != nil {
				return err
			}
			ctx, cancel := c.call(cmd.Context())
			defer cancel()
			if _, err := api.DeleteFleet(ctx, &tetherv1.DeleteFleetRequest{Name: fleetName(args[0])}); err != nil {
				return fmt.Errorf("delete: %w", err)
			}
			_, err = fmt.Fprintf(c.out, "%s deleted\n", fleetName(args[0]))
			return err
		},
	}
	cmd.AddCommand(create, list, get, scale, del)
	return cmd
}

func (c *cli) printFleets(f *tetherv1.Fleet) error {
	return c.render(f, func(w *tabwriter.Writer) { fleetTable(w, f) })
}

func fleetTable(w io.Writer, fleets ...*tetherv1.Fleet) {
	fmt.Fprintln(w, "NAME\tREPLICAS\tREADY\tALLOCATED\tUNHEALTHY\tSCHEDULING\tAGE")
	for _, f := range fleets {
		s := f.GetStatus()
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%s\t%s\n", f.GetName(), f.GetReplicas(), s.GetReadyReplicas(),
			s.GetAllocatedReplicas(), s.GetUnhealthyReplicas(), f.GetScheduling(), age(f.GetCreateTime()))
	}
}

// readFleet reads a fleet file (YAML or JSON) and its optional name field.
func readFleet(path string, stdin io.Reader) (*tetherv1.Fleet, string, error) {
	var raw []byte
	var err error
	if path == "-" {
		raw, err = io.ReadAll(stdin)
	} else {
		raw, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, "", fmt.Errorf("read fleet file: %w", err)
	}
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return nil, "", fmt.Errorf("%s is neither YAML nor JSON: %w", path, err)
	}
	fleet := &tetherv1.Fleet{}
	if err := protojson.Unmarshal(js, fleet); err != nil {
		return nil, "", fmt.Errorf("%s: %w", path, err)
	}
	id := strings.TrimPrefix(fleet.GetName(), "fleets/")
	fleet.Name = ""
	if bytes.Contains(js, []byte(`"status"`)) {
		return nil, "", fmt.Errorf("%s: status is output only", path)
	}
	return fleet, id, nil
}
