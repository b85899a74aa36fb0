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
	cmd := group("hosts", "List, show, cordon, drain and uncordon hosts", "host")
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
	cmd.AddCommand(list, get,
		a.hostAction("cordon", "Stop new game servers going to a host; those it runs carry on",
			func(ctx context.Context, c *client, name string) (*tetherv1.Host, error) {
				return c.hosts.CordonHost(ctx, &tetherv1.CordonHostRequest{Name: name})
			}),
		a.hostAction("uncordon", "Let a cordoned or drained host take new game servers again (a drain in progress ends)",
			func(ctx context.Context, c *client, name string) (*tetherv1.Host, error) {
				return c.hosts.UncordonHost(ctx, &tetherv1.UncordonHostRequest{Name: name})
			}),
		a.hostAction("drain", "Cordon a host and move its game servers without a match elsewhere; matches finish (DRAINING, then DRAINED)",
			func(ctx context.Context, c *client, name string) (*tetherv1.Host, error) {
				return c.hosts.DrainHost(ctx, &tetherv1.DrainHostRequest{Name: name})
			}))
	return cmd
}

// hostAction is a subcommand that calls one host RPC on NAME and shows the
// host as the call left it. Each is idempotent: a repeat changes nothing.
func (a *app) hostAction(use, short string, call func(context.Context, *client, string) (*tetherv1.Host, error)) *cobra.Command {
	return &cobra.Command{
		Use:   use + " NAME",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := hostName(args[0])
			return a.withClient(func(c *client) error {
				ctx, cancel := c.call(cmd.Context())
				defer cancel()
				h, err := call(ctx, c, name)
				if err != nil {
					return c.apiError(name, err)
				}
				return a.print(h, func(w io.Writer) { a.hostTable(w, h) })
			})
		},
	}
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
		state := enumName(h.GetState())
		if h.GetCordoned() && h.GetState() == tetherv1.Host_ONLINE {
			state += ",CORDONED" // DRAINING and DRAINED say it already
		}
		row(w, shortName(h.GetName()), state,
			fmt.Sprintf("%d/%d", h.GetAllocatedSlots(), h.GetCapacity()),
			orDash(h.GetAddress()), orDash(strings.Join(labels, ",")), heartbeat)
	}
}
