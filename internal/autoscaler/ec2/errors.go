package ec2

import (
	"cmp"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/smithy-go"

	"github.com/kube-neuron/kube-neuron/internal/autoscaler"
)

// SubnetFailure is why a launch failed in one subnet.
type SubnetFailure struct {
	Subnet, Code, Message string
}

// CapacityError is Launch's error when no subnet could launch the instance type: EC2 had no
// capacity for it (InsufficientInstanceCapacity) or the subnet's Availability Zone does not
// offer it (Unsupported). The controller may try another type or wait.
type CapacityError struct {
	InstanceType string
	// Reservation is the capacity reservation a targeted launch went into ("" on demand): it
	// had no room left (ReservationCapacityExceeded), or its zone no capacity.
	Reservation string
	Failures    []SubnetFailure
}

func (e *CapacityError) Error() string {
	if e.Reservation != "" {
		return fmt.Sprintf("ec2: the capacity reservation %s could not launch a %s: %s. Its instances are in use (or EC2 counts them so until they have terminated); the autoscaler plans again on its next round with the reservation's new count",
			e.Reservation, e.InstanceType, failureList(e.Failures))
	}
	subnets := make([]string, 0, len(e.Failures))
	for _, f := range e.Failures {
		subnets = append(subnets, f.Subnet)
	}
	return fmt.Sprintf("ec2: no subnet could launch a %s (tried %s): %s. Add subnets in other Availability Zones that offer %s, allow other instance types, or reserve capacity (an On-Demand Capacity Reservation or a Capacity Block) that the launch template targets; the autoscaler tries again on its next scale-up",
		e.InstanceType, strings.Join(subnets, ", "), failureList(e.Failures), e.InstanceType)
}

func failureList(fs []SubnetFailure) string {
	parts := make([]string, 0, len(fs))
	for _, f := range fs {
		parts = append(parts, f.Subnet+": "+f.Code+": "+f.Message)
	}
	return strings.Join(parts, "; ")
}

// PermissionError is an UnauthorizedOperation: the autoscaler's IAM role may not make the call.
type PermissionError struct {
	Operation string // RunInstances, DescribeInstances, TerminateInstances, CreateTags or DeleteTags
	Message   string // EC2's message
	Err       error
}

// iamActions are the IAM actions (and conditions) each call needs.
var iamActions = map[string]string{
	"RunInstances":                 "ec2:RunInstances, ec2:CreateTags with the condition ec2:CreateAction=RunInstances (the launch tags), and iam:PassRole on the role of the launch template's instance profile",
	"DescribeInstances":            "ec2:DescribeInstances",
	"TerminateInstances":           "ec2:TerminateInstances on instances tagged " + autoscaler.LaunchedByLabel + "=" + autoscaler.LaunchedByValue,
	"CreateTags":                   ownTags,
	"DescribeCapacityReservations": "ec2:DescribeCapacityReservations (to list the capacity reservations configured in " + capacityReservationsOption + ")",
	"DescribeCapacityBlocks":       "ec2:DescribeCapacityBlocks (to tell UltraServer Capacity Blocks from instance blocks)",
	"DescribeSubnets":              "ec2:DescribeSubnets (to find the configured subnets in a reservation's Availability Zone)",
	"DeleteTags":                   ownTags,
}

// ownTags is the permission that records the pods later rounds plan onto a launching node.
const ownTags = "ec2:CreateTags and ec2:DeleteTags on instances tagged " + autoscaler.LaunchedByLabel + "=" + autoscaler.LaunchedByValue +
	" for the tag keys " + autoscaler.PlannedPodsAnnotation + "* (the pods planned onto a launching node after its launch)"

func (e *PermissionError) Error() string {
	hint := ""
	if strings.Contains(e.Message, "Encoded authorization failure message") {
		hint = " (aws sts decode-authorization-message --encoded-message <message> shows which statement denied it)"
	}
	return fmt.Sprintf("ec2: %s was denied (UnauthorizedOperation): the autoscaler's IAM role needs %s; grant it the IAM policy in docs/autoscaler.md. EC2 said: %s%s",
		e.Operation, iamActions[e.Operation], e.Message, hint)
}

func (e *PermissionError) Unwrap() error { return e.Err }

// apiCode is an EC2 error's code and message ("" if err is not an API error).
func apiCode(err error) (code, message string) {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode(), ae.ErrorMessage()
	}
	return "", ""
}

// launchError explains a RunInstances error that no other subnet would fix.
func (p *Provider) launchError(r autoscaler.NodeRequest, subnet, code, msg string, err error) error {
	switch {
	case strings.HasPrefix(code, "InvalidLaunchTemplate"):
		return fmt.Errorf("ec2: launch template %s (version %s): %s: %s. Set the autoscaler's launch template to the id (lt-...) or name of a launch template in the cluster's region: %w",
			p.o.LaunchTemplate, cmp.Or(p.o.LaunchTemplateVersion, "$Latest"), code, msg, err)
	case strings.HasPrefix(code, "InvalidSubnetID"):
		return fmt.Errorf("ec2: subnet %s: %s: %s. Set the autoscaler's subnets to subnets of the cluster's VPC: %w", subnet, code, msg, err)
	case code == "VcpuLimitExceeded" || code == "InstanceLimitExceeded":
		return fmt.Errorf("ec2: launching a %s: %s: %s. Request a higher quota in Service Quotas (Amazon EC2, Running On-Demand Trn instances or Inf instances) or lower the autoscaler's node limits: %w",
			r.Type, code, msg, err)
	}
	return fmt.Errorf("ec2: launching a %s for node %s in %s: %w", r.Type, r.Name, subnet, err)
}
