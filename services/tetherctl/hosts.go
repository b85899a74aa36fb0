package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
)

func (c *cli) hostsCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "hosts", Aliases: []string{"host"}, Short: "List and show hosts"}
	list := &cobra.Command{
		Use: "list", Short: "List hosts", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			api, err := c.hosts()
			if err != nil {
				return err
			}
			resp := &tetherv1.ListHostsResponse{}
			token := ""
			for {
				ctx, cancel := c.call(cmd.Context())
				page, err := api.ListHosts(ctx, &tetherv1.ListHostsRequest{PageSize: 1000, PageToken: token})
				cancel()
				if err != nil {
					return fmt.Errorf("list: %w", err)
				}
				resp.Hosts = append(resp.Hosts, page.GetHosts()...)
				if token = page.GetNextPageToken(); token == "" {
					break
				}
			}
			return c.render(resp, func(w *tabwriter.Writer) { hostTable(w, resp.GetHosts()...) })
		},
	}
	get := &cobra.Command{
		Use: "get NAME", Short: "Show a host", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			api, err := c.hosts()
			if err != nil {
				return err
			}
			name := args[0]
			if !strings.HasPrefix(name, "hosts/") {
				name = "hosts/" + name
			}
			ctx, cancel := c.call(cmd.Context())
			defer cancel()
			h, err := api.GetHost(ctx, &tetherv1.GetHostRequest{Name: name})
			if err != nil {
				return fmt.Errorf("get: %w", err)
			}
			return c.render(h, func(w *tabwriter.Writer) { hostTable(w, h) })
		},
	}
	cmd.AddCommand(list, get)
	return cmd
}

func hostTable(w io.Writer, hosts ...*tetherv1.Host) {
	fmt.Fprintln(w, "NAME\tSTATE\tUSED/CAPACITY\tADDRESS\tLABELS\tHEARTBEAT")
	for _, h := range hosts {
		var labels []string
		for k, v := range h.GetLabels() {
			labels = append(labels, k+"="+v)
		}
		sort.Strings(labels)
		fmt.Fprintf(w, "%s\t%s\t%d/%d\t%s\t%s\t%s\n", h.GetName(), h.GetState(), h.GetAllocatedSlots(), h.GetCapacity(),
			orDash(h.GetAddress()), orDash(strings.Join(labels, ",")), age(h.GetLastHeartbeatTime()))
	}
}
