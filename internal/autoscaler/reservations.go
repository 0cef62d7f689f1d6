package autoscaler

import (
	"context"
	"time"

	"k8s.io/klog/v2"

	"github.com/kube-neuron/kube-neuron/internal/autoscaler/plan"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// Defaults of the reserved capacity options of ControllerOptions.
const (
	// DefaultCapacityBlockDrainLead: the nodes of an instance Capacity Block are drained this
	// long before the block ends. EC2 starts terminating an instance block's instances 30
	// minutes before its end; 40 minutes (Karpenter's lead) leaves 10 minutes to evict the
	// pods through the eviction API, PodDisruptionBudgets permitting, before EC2 does it
	// without asking.
	DefaultCapacityBlockDrainLead = 40 * time.Minute
	// DefaultUltraServerCapacityBlockDrainLead: the same for UltraServer Capacity Blocks
	// (trn2u), which EC2 starts terminating 60 minutes before their end: Karpenter's 40
	// minutes would be 20 minutes too late; 70 leaves the same 10 minutes.
	DefaultUltraServerCapacityBlockDrainLead = 70 * time.Minute
	// DefaultNodeStartupEstimate: how long a new node takes to launch, register and take its
	// pods. A pod is planned onto a reservation only if it could run there for a while: the
	// reservation does not end within this estimate and the drain lead.
	DefaultNodeStartupEstimate = 10 * time.Minute
)

// How long before a Capacity Block's end EC2 starts terminating its instances. The drain's
// deadline (drainDeadline) falls before that when the lead leaves room for it.
const (
	instanceBlockTermination    = 30 * time.Minute
	ultraServerBlockTermination = 60 * time.Minute
)

// leads are the drain leads and the node startup estimate the reservation rules use.
type leads struct {
	block, ultraServer, startup time.Duration
}

// of is the drain lead of a reservation: the UltraServer lead for an UltraServer block, else
// the instance block lead.
func (l leads) of(ultraServer bool) time.Duration {
	if ultraServer {
		return l.ultraServer
	}
	return l.block
}

// usableReservations returns the reservations a pod planned now could still start and run on:
// started (Start not after now), and either without an end or ending later than the lead
// (drainage starts then) plus the node startup estimate from now. The others are left out, so
// the planner puts no pod onto a block that would be drained before the pod started.
func usableReservations(rs []Reservation, now time.Time, l leads) []Reservation {
	var out []Reservation
	for _, r := range rs {
		if r.Start.After(now) {
			continue
		}
		if !r.End.IsZero() && !r.End.Add(-l.of(r.UltraServerType != "")).Add(-l.startup).After(now) {
			continue
		}
		out = append(out, r)
	}
	return out
}

// planReservations converts the usable reservations for the planner; unknown reports those
// whose instance type the catalog does not have (they are left out).
func planReservations(rs []Reservation, catalog *topology.Catalog) (out []plan.Reservation, unknown []Reservation) {
	for _, r := range rs {
		if _, ok := catalog.Lookup(r.InstanceType); !ok {
			unknown = append(unknown, r)
			continue
		}
		out = append(out, plan.Reservation{ID: r.ID, InstanceType: r.InstanceType, Available: r.Available, UltraServer: r.UltraServerType != ""})
	}
	return out, unknown
}

// roundReservations are the provider's reservations as one round sees them.
type roundReservations struct {
	// byID: every reservation the provider listed (the drain reads their ends).
	byID map[string]Reservation
	// usable: those the planner may launch into.
	usable []plan.Reservation
}

// reservations lists the provider's reservations for the round. When the listing fails the
// round plans without reservations (on demand only, if the fallback allows it), the error is
// logged and counted, and the nodes of Capacity Blocks are drained by the end their annotation
// carries.
func (c *Controller) reservations(ctx context.Context, now time.Time) roundReservations {
	logger := klog.FromContext(ctx)
	rs, err := c.o.Provider.Reservations(ctx)
	if err != nil {
		c.metrics.providerErrors.WithLabelValues("reservations").Inc()
		logger.Error(err, "Listing the capacity reservations failed; this round plans without them", "provider", c.o.Provider.Name(), "onDemandFallback", !c.o.ReservedOnly)
		return roundReservations{}
	}
	out := roundReservations{byID: make(map[string]Reservation, len(rs))}
	for _, r := range rs {
		out.byID[r.ID] = r
	}
	usable := usableReservations(rs, now, c.leads())
	var unknown []Reservation
	out.usable, unknown = planReservations(usable, c.o.Catalog)
	for _, r := range unknown {
		key := r.ID + "/" + r.InstanceType
		if !c.unknownReservations[key] {
			c.unknownReservations[key] = true
			logger.Info("Capacity reservation of an instance type the catalog does not have: not used. Add the type to the instance catalog (--catalog) to use it",
				"reservation", r.ID, "instanceType", r.InstanceType)
		}
	}
	logger.V(6).Info("Capacity reservations", "listed", len(rs), "usable", len(out.usable))
	return out
}

func (c *Controller) leads() leads {
	return leads{block: c.o.CapacityBlockDrainLead, ultraServer: c.o.UltraServerCapacityBlockDrainLead, startup: c.o.NodeStartupEstimate}
}
