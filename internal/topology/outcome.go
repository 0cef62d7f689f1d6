package topology

import "fmt"

// Outcome is whether a request fits a node and, when it does not, why, as a value: a caller
// that asks only whether and where a request fits gets its answer without an error being built,
// and Err builds the error (and its message) when the caller wants it.
type Outcome uint8

// Outcomes.
const (
	// Fits: the request is placed.
	Fits Outcome = iota
	// NotAccepted: the node's instance type never accepts the request, whatever is in use;
	// Err returns Shape.Validate's error (an *UnsupportedCountError for a count the type does
	// not accept).
	NotAccepted
	// NoFreeSet: the request is valid but no valid set of it is free now; Err returns an
	// *InsufficientError.
	NoFreeSet
)

func (o Outcome) String() string {
	switch o {
	case Fits:
		return "fits"
	case NotAccepted:
		return "not accepted"
	case NoFreeSet:
		return "no free set"
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// Err returns the error Place returns for request r on usage u when the decision had outcome
// o: nil when the request fits. Call it before u changes; the message lists u's free devices
// and cores.
func (o Outcome) Err(u *Usage, r Request) error {
	switch o {
	case Fits:
		return nil
	case NotAccepted:
		return u.shape.Validate(r)
	}
	s := u.shape
	return &InsufficientError{
		InstanceType: s.Type.Name, Request: r,
		FreeDevices: u.FreeDevices(), FreeCores: u.FreeCores(),
		Hint: s.describeSets(r.Count),
	}
}

// TryPlace is PlaceInto for a caller that asks only whether and where the request fits: it
// builds no error, so that it allocates nothing in steady state whether the request fits or
// not. Unless the outcome is Fits, dst is left unchanged; the outcome's Err gives the error
// PlaceInto would have returned.
func (p Policy) TryPlace(u *Usage, r Request, dst *Fit) Outcome {
	e := evaluators.Get().(*evaluator)
	defer putEvaluator(e)
	return e.decide(p, u, r, dst)
}

// TryPlace is p.TryPlace using the Placer's scratch space.
func (pl *Placer) TryPlace(p Policy, u *Usage, r Request, dst *Fit) Outcome {
	defer func() { pl.e.u, pl.e.s = nil, nil }()
	return pl.e.decide(p, u, r, dst)
}
