package ec2

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsec2 "github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"k8s.io/klog/v2"

	"github.com/kube-neuron/kube-neuron/internal/autoscaler"
	"github.com/kube-neuron/kube-neuron/internal/labels"
)

// CapacityBlockIDAnnotation is, on an instance of a Capacity Block, EC2's id of the block
// (types.Instance.CapacityBlockId): on trn2u it names the UltraServer the instance is part of.
const CapacityBlockIDAnnotation = "kube-neuron.io/capacity-block-id"

// EC2 error codes of reserved capacity.
const (
	codeReservationFull        = "ReservationCapacityExceeded"
	codeReservationNotFound    = "InvalidCapacityReservationId.NotFound"
	codeReservationMalformed   = "InvalidCapacityReservationId.Malformed"
	reservationStateActive     = string(types.CapacityReservationStateActive)
	reservationStateScheduled  = string(types.CapacityReservationStateScheduled)
	capacityReservationsOption = "autoscaler.ec2.capacityReservations (--ec2-capacity-reservations)"
)

// Reservations implements autoscaler.Provider: the active and scheduled reservations the
// configured selectors name. Id terms are described in one call by CapacityReservationIds (an id
// EC2 does not know fails the round with an error naming it: the configuration is wrong, and
// launching on demand instead would hide that); each tags term in a call of its own with one
// tag:<key> filter per tag (a reservation must carry them all); the union counts each
// reservation once. A Capacity Block's UltraServer type comes from DescribeCapacityBlocks of its
// CapacityBlockId (CapacityReservation itself does not carry it).
func (p *Provider) Reservations(ctx context.Context) ([]autoscaler.Reservation, error) {
	if len(p.o.CapacityReservations) == 0 {
		return nil, nil
	}
	states := filter("state", reservationStateActive, reservationStateScheduled)
	var found []types.CapacityReservation
	var ids []string
	for _, t := range p.o.CapacityReservations {
		if t.ID != "" {
			ids = append(ids, t.ID)
		}
	}
	if len(ids) > 0 {
		got, err := p.describeReservations(ctx, &awsec2.DescribeCapacityReservationsInput{CapacityReservationIds: ids, Filters: []types.Filter{states}})
		if err != nil {
			return nil, err
		}
		found = append(found, got...)
		for _, id := range ids {
			if !slices.ContainsFunc(got, func(cr types.CapacityReservation) bool { return aws.ToString(cr.CapacityReservationId) == id }) {
				klog.FromContext(ctx).V(2).Info("Configured capacity reservation is neither active nor scheduled (expired, cancelled, pending...); not using it", "reservation", id)
			}
		}
	}
	for _, t := range p.o.CapacityReservations {
		if len(t.Tags) == 0 {
			continue
		}
		fs := []types.Filter{states}
		for _, k := range slices.Sorted(maps.Keys(t.Tags)) {
			fs = append(fs, filter("tag:"+k, t.Tags[k]))
		}
		got, err := p.describeReservations(ctx, &awsec2.DescribeCapacityReservationsInput{Filters: fs, MaxResults: aws.Int32(p.pageSize)})
		if err != nil {
			return nil, err
		}
		found = append(found, got...)
	}
	out, err := p.toReservations(ctx, found)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	for _, r := range out {
		p.known[r.ID] = r
	}
	p.mu.Unlock()
	klog.FromContext(ctx).V(5).Info("Capacity reservations", "count", len(out))
	return out, nil
}

// describeReservations pages through DescribeCapacityReservations.
func (p *Provider) describeReservations(ctx context.Context, in *awsec2.DescribeCapacityReservationsInput) ([]types.CapacityReservation, error) {
	pages := awsec2.NewDescribeCapacityReservationsPaginator(p.c, in)
	var out []types.CapacityReservation
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			code, msg := apiCode(err)
			switch code {
			case codeUnauthorized:
				return nil, &PermissionError{Operation: "DescribeCapacityReservations", Message: msg, Err: err}
			case codeReservationNotFound, codeReservationMalformed:
				return nil, fmt.Errorf("ec2: the capacity reservations %s name one EC2 does not know in this region and account (%s: %s). Correct or remove it in %s: %w",
					strings.Join(in.CapacityReservationIds, ", "), code, msg, capacityReservationsOption, err)
			}
			return nil, fmt.Errorf("ec2: describing capacity reservations: %w", err)
		}
		out = append(out, page.CapacityReservations...)
	}
	return out, nil
}

// toReservations converts, dropping repeats, and looks up the UltraServer type of Capacity Blocks.
func (p *Provider) toReservations(ctx context.Context, found []types.CapacityReservation) ([]autoscaler.Reservation, error) {
	var blockIDs []string
	for _, cr := range found {
		if cr.ReservationType == types.CapacityReservationTypeCapacityBlock && aws.ToString(cr.CapacityBlockId) != "" && !slices.Contains(blockIDs, aws.ToString(cr.CapacityBlockId)) {
			blockIDs = append(blockIDs, aws.ToString(cr.CapacityBlockId))
		}
	}
	ultra := map[string]string{} // block id -> UltraServer type
	if len(blockIDs) > 0 {
		pages := awsec2.NewDescribeCapacityBlocksPaginator(p.c, &awsec2.DescribeCapacityBlocksInput{CapacityBlockIds: blockIDs})
		for pages.HasMorePages() {
			page, err := pages.NextPage(ctx)
			if err != nil {
				if code, msg := apiCode(err); code == codeUnauthorized {
					return nil, &PermissionError{Operation: "DescribeCapacityBlocks", Message: msg, Err: err}
				}
				return nil, fmt.Errorf("ec2: describing the Capacity Blocks %s: %w", strings.Join(blockIDs, ", "), err)
			}
			for _, b := range page.CapacityBlocks {
				ultra[aws.ToString(b.CapacityBlockId)] = aws.ToString(b.UltraserverType)
			}
		}
	}
	now := p.now()
	var out []autoscaler.Reservation
	seen := map[string]bool{}
	for _, cr := range found {
		id := aws.ToString(cr.CapacityReservationId)
		if seen[id] {
			continue
		}
		seen[id] = true
		r := autoscaler.Reservation{
			ID:               id,
			InstanceType:     aws.ToString(cr.InstanceType),
			AvailabilityZone: aws.ToString(cr.AvailabilityZone),
			Total:            int(aws.ToInt32(cr.TotalInstanceCount)),
			Available:        int(aws.ToInt32(cr.AvailableInstanceCount)),
			CapacityBlock:    cr.ReservationType == types.CapacityReservationTypeCapacityBlock,
			UltraServerType:  ultra[aws.ToString(cr.CapacityBlockId)],
			Start:            aws.ToTime(cr.StartDate),
			End:              aws.ToTime(cr.EndDate),
		}
		// A scheduled reservation cannot take instances yet, whatever its start date says (a
		// delivery may be late): report its start in the future so that no pod is planned onto it.
		if string(cr.State) == reservationStateScheduled && !r.Start.After(now) {
			r.Start = now.Add(time.Minute)
		}
		out = append(out, r)
	}
	return out, nil
}

// reservation is the reservation of the id: as the last Reservations call saw it, else described.
func (p *Provider) reservation(ctx context.Context, id string) (autoscaler.Reservation, error) {
	p.mu.Lock()
	r, ok := p.known[id]
	p.mu.Unlock()
	if ok {
		return r, nil
	}
	found, err := p.describeReservations(ctx, &awsec2.DescribeCapacityReservationsInput{CapacityReservationIds: []string{id}})
	if err != nil {
		return autoscaler.Reservation{}, err
	}
	rs, err := p.toReservations(ctx, found)
	if err != nil {
		return autoscaler.Reservation{}, err
	}
	if len(rs) == 0 {
		return autoscaler.Reservation{}, fmt.Errorf("ec2: EC2 does not list the capacity reservation %s", id)
	}
	p.mu.Lock()
	p.known[id] = rs[0]
	p.mu.Unlock()
	return rs[0], nil
}

// subnetsIn are the configured subnets in the Availability Zone, in their configured order. The
// subnets' zones are described once (DescribeSubnets) and kept.
func (p *Provider) subnetsIn(ctx context.Context, az string) ([]string, error) {
	p.mu.Lock()
	zones := p.subnetAZ
	p.mu.Unlock()
	if zones == nil {
		pages := awsec2.NewDescribeSubnetsPaginator(p.c, &awsec2.DescribeSubnetsInput{SubnetIds: p.o.Subnets})
		zones = map[string]string{}
		for pages.HasMorePages() {
			page, err := pages.NextPage(ctx)
			if err != nil {
				code, msg := apiCode(err)
				switch {
				case code == codeUnauthorized:
					return nil, &PermissionError{Operation: "DescribeSubnets", Message: msg, Err: err}
				case strings.HasPrefix(code, "InvalidSubnetID"):
					return nil, fmt.Errorf("ec2: describing the subnets %s: %s: %s. Set the autoscaler's subnets to subnets of the cluster's VPC: %w", strings.Join(p.o.Subnets, ", "), code, msg, err)
				}
				return nil, fmt.Errorf("ec2: describing the subnets %s: %w", strings.Join(p.o.Subnets, ", "), err)
			}
			for _, s := range page.Subnets {
				zones[aws.ToString(s.SubnetId)] = aws.ToString(s.AvailabilityZone)
			}
		}
		p.mu.Lock()
		p.subnetAZ = zones
		p.mu.Unlock()
	}
	var out, others []string
	for _, s := range p.o.Subnets {
		if zones[s] == az {
			out = append(out, s)
		} else {
			others = append(others, s+" ("+zones[s]+")")
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("ec2: no configured subnet is in %s, the Availability Zone of the reservation; the subnets are %s. Add a subnet of %s to the autoscaler's subnets",
			az, strings.Join(others, ", "), az)
	}
	return out, nil
}

// withCapacity is the request with the capacity labels (and a Capacity Block's end annotation)
// the launch records in its tags.
func withCapacity(r autoscaler.NodeRequest, res *autoscaler.Reservation) autoscaler.NodeRequest {
	r.Labels = maps.Clone(r.Labels)
	if r.Labels == nil {
		r.Labels = map[string]string{}
	}
	r.Annotations = maps.Clone(r.Annotations)
	if r.Annotations == nil {
		r.Annotations = map[string]string{}
	}
	if res == nil {
		r.Labels[labels.CapacityType] = labels.CapacityTypeOnDemand
		return r
	}
	r.Labels[labels.CapacityType] = labels.CapacityTypeReserved
	r.Labels[labels.CapacityReservationID] = res.ID
	if res.CapacityBlock && !res.End.IsZero() && r.Annotations[labels.CapacityReservationEndAnnotation] == "" {
		r.Annotations[labels.CapacityReservationEndAnnotation] = res.End.UTC().Format(time.RFC3339)
	}
	return r
}

// ErrUltraServer is LaunchUltraServer's answer for nodes without a reservation: EC2 sells
// UltraServer capacity (trn2u.48xlarge) as UltraServer Capacity Blocks only.
var ErrUltraServer = errors.New("the ec2 provider launches UltraServers only into UltraServer Capacity Blocks: EC2 sells trn2u.48xlarge capacity that way. " +
	"Buy an UltraServer Capacity Block and name it in " + capacityReservationsOption + "; the autoscaler then launches whole UltraServers into it")

// LaunchUltraServer implements autoscaler.Provider: the nodes of one UltraServer go into the
// UltraServer Capacity Block their requests name, one RunInstances per node with the node's own
// client token (as Launch, so a retry or a restart launches each once), all or none: when one
// fails, the nodes launched are terminated again and the error returned (a *CapacityError when
// the block was full). Without a reservation it launches nothing (ErrUltraServer), rather than
// unrelated trn2u.48xlarge instances that would share no UltraServer.
func (p *Provider) LaunchUltraServer(ctx context.Context, id string, nodes []autoscaler.NodeRequest) ([]autoscaler.Instance, error) {
	if len(nodes) == 0 {
		return nil, fmt.Errorf("ec2: UltraServer %s has no nodes to launch", id)
	}
	resID := nodes[0].Reservation
	if resID == "" {
		return nil, ErrUltraServer
	}
	for _, n := range nodes {
		if n.Reservation != resID {
			return nil, fmt.Errorf("ec2: the nodes of UltraServer %s name different reservations (%s, %s); one UltraServer launches into one Capacity Block", id, resID, n.Reservation)
		}
	}
	res, err := p.reservation(ctx, resID)
	if err != nil {
		return nil, err
	}
	if !res.CapacityBlock || res.UltraServerType == "" {
		return nil, fmt.Errorf("ec2: UltraServer %s: the reservation %s is not an UltraServer Capacity Block; an UltraServer's nodes launch only into one", id, resID)
	}
	logger := klog.FromContext(ctx).WithValues("ultraServer", id, "reservation", resID)
	out := make([]autoscaler.Instance, 0, len(nodes))
	for i, n := range nodes {
		in, err := p.Launch(ctx, n)
		if err != nil {
			// Terminated by instance id: DescribeInstances may not list them yet.
			var undo []error
			if ids := instanceIDs(out); len(ids) > 0 {
				if _, terr := p.c.TerminateInstances(ctx, &awsec2.TerminateInstancesInput{InstanceIds: ids}); terr != nil {
					if code, msg := apiCode(terr); code == codeUnauthorized {
						terr = &PermissionError{Operation: "TerminateInstances", Message: msg, Err: terr}
					}
					undo = append(undo, terr)
				}
			}
			logger.V(2).Info("UltraServer launch failed, terminated its nodes", "failedNode", n.Name, "terminated", i, "err", err)
			if len(undo) > 0 {
				return nil, fmt.Errorf("ec2: UltraServer %s: launching node %s into %s failed, and terminating the %d nodes launched before it failed too (%w); they are terminated on the next scale-down: %w",
					id, n.Name, resID, i, errors.Join(undo...), err)
			}
			return nil, fmt.Errorf("ec2: UltraServer %s: launching node %s into %s failed; the %d nodes launched before it were terminated: %w", id, n.Name, resID, i, err)
		}
		out = append(out, in)
	}
	logger.V(2).Info("Launched UltraServer", "nodes", len(out))
	return out, nil
}

// instanceIDs are the EC2 instance ids of the instances (the last element of the provider ID).
func instanceIDs(ins []autoscaler.Instance) []string {
	var out []string
	for _, in := range ins {
		if i := strings.LastIndexByte(in.ProviderID, '/'); i >= 0 && strings.HasPrefix(in.ProviderID[i+1:], "i-") {
			out = append(out, in.ProviderID[i+1:])
		}
	}
	return out
}
