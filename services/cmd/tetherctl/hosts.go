package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
)

func (a *app) hostsCommand() *cobra.Command {
	cmd := group("hosts", "List and show hosts", "host")
	var minSeq int64
	list := &cobra.Command{
		Use:   "list",
		Short: "List hosts with their slots and last heartbeat",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withClient(func(c *client) error {
				hosts, err := listAll(cmd.Context(), c, func(ctx context.Context, token string) ([]*tetherv1.Host, string, error) {
					resp, err := c.hosts.ListHosts(ctx, &tetherv1.ListHostsRequest{
						PageSize: pageSize, PageToken: token, MinSequence: minSeq,
					})
					return resp.GetHosts(), resp.GetNextPageToken(), err
				})
				if err != nil {
					return c.apiError("", err)
				}
				return printList(a, "hosts", hosts, func(w io.Writer) { a.hostTable(w, hosts...) })
			})
		},
	}
	get := &cobra.Command{
		Use:   "get NAME",
		Short: "Show a host",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := hostName(args[0])
			return a.withClient(func(c *client) error {
				ctx, cancel := c.call(cmd.Context())
				defer cancel()
				h, err := c.hosts.GetHost(ctx, &tetherv1.GetHostRequest{Name: name, MinSequence: minSeq})
				if err != nil {
					return c.apiError(name, err)
				}
				return a.print(h, func(w io.Writer) { a.hostTable(w, h) })
			})
		},
	}
	addMinSequence(list, &minSeq)
	addMinSequence(get, &minSeq)
	cmd.AddCommand(list, get)
	return cmd
}

func (a *app) hostTable(w io.Writer, hosts ...*tetherv1.Host) {
	row(w, "NAME", "STATE", "USED/CAPACITY", "ADDRESS", "LABELS", "HEARTBEAT")
	now := a.now()
	for _, h := range hosts {
		labels := make([]string, 0, len(h.GetLabels()))
		for k, v := range h.GetLabels() {
			labels = append(labels, k+"="+v)
		}
		slices.Sort(labels)
		heartbeat := "-"
		if t := h.GetLastHeartbeatTime(); t != nil {
			heartbeat = age(now, t) + " ago"
		}
		row(w, shortName(h.GetName()), enumName(h.GetState()),
			fmt.Sprintf("%d/%d", h.GetAllocatedSlots(), h.GetCapacity()),
			orDash(h.GetAddress()), orDash(strings.Join(labels, ",")), heartbeat)
	}
}
