// Package ec2 is neuron-autoscaler's ec2 provider (issue 7): it launches Neuron nodes as EC2
// instances with aws-sdk-go-v2 from one launch template into the first of a list of subnets that
// has capacity, lists the instances it launched, records the pods later planned onto them in
// their tags, and terminates them.
//
// # Idempotency
//
// A launch survives a restart of the autoscaler, and an error after EC2 accepted it, without
// launching twice. Launch first looks for a pending or running instance tagged
// kube-neuron.io/node-name=<the request's name> (names are deterministic per plan, see
// autoscaler.NodeName). Since DescribeInstances is eventually consistent, RunInstances also
// carries ClientToken=<name>: EC2 returns the instance the token already launched instead of
// launching another. The token is the same in every subnet, so a retry in a subnet other than
// the one the token launched into fails with IdempotentParameterMismatch; Launch then finds that
// instance by its client token. EC2 keeps a token for at least 24 hours after its instance
// terminated and keeps returning that instance; when RunInstances returns a terminated instance
// (the same pods planned again after their node went away), Launch launches with the token
// <name>-<that instance's id>, a chain a restarted autoscaler walks the same way.
//
// # Tags
//
// Every instance carries: Name and kube-neuron.io/node-name = the request's name;
// kube-neuron.io/launched-by=neuron-autoscaler; kubernetes.io/cluster/<cluster>=owned when a
// cluster name is set; kube-neuron.io/allocation-mode=<mode>; kube-neuron.io/planned-pods (and,
// when the list is longer than a tag value's 256 characters, kube-neuron.io/planned-pods-2 ...
// -8: the value split in order; a list longer than 2048 characters keeps only its first whole
// pod names there); and the cluster-autoscaler/Karpenter node-template convention,
// k8s.io/cluster-autoscaler/node-template/label/<key>=<value> per label and
// k8s.io/cluster-autoscaler/node-template/taint/<key>=<value>:<effect> per taint. Volumes carry
// Name, node-name, launched-by and the cluster tag. Instances, Delete and SetPlannedPods only
// ever see instances tagged launched-by (and with the cluster tag, when set).
//
// When a later planning round puts more pods onto a launching node, SetPlannedPods rewrites its
// planned-pods tags with CreateTags (the whole sorted list, split as at launch) and deletes with
// DeleteTags the planned-pods-N tags a shorter list no longer needs, so that a restarted
// autoscaler, which reads the planned pods back from the tags, counts those pods on the node.
//
// # Launch template
//
// Tags are not node labels. The launch template's user data joins the node to the cluster and
// must register it with the Neuron taint, the launching taint (autoscaler.LaunchingTaint, which
// the controller removes once the node serves and its planned pods are nominated to it) and the
// labels the autoscaler planned it with: on AL2023, a nodeadm NodeConfig with spec.kubelet.flags
// [--node-labels=..., --register-with-taints=aws.amazon.com/neuron=true:NoSchedule,
// kube-neuron.io/launching=true:NoSchedule]; on AL2, bootstrap.sh --kubelet-extra-args with the
// same flags. Labels that differ per node
// (kube-neuron.io/allocation-mode) need one launch template per allocation mode or the
// controller labelling the Node when it registers.
//
// # Node names
//
// Instance.Name is the name the node registers under, which the controller nominates the planned
// pods to (status.nominatedNodeName) and finds the Node by; the request's name stays in the Name
// and node-name tags. With Options.NodeNameSource private-dns-name (the default, what EKS's AMIs
// do) it is the instance's PrivateDnsName: ip-10-0-0-12.ec2.internal,
// ip-10-0-0-12.us-west-2.compute.internal, or i-0123456789abcdef0.us-west-2.compute.internal in a
// subnet with resource-name hostnames. With instance-id it is the instance id,
// i-0123456789abcdef0 (Bottlerocket with hostname-override-source instance-id). Until EC2 reports
// a private DNS name, the instance is named by its request; the controller follows it to the new
// name by its provider ID. A launch template that names the node otherwise (a kubelet
// --hostname-override of its own) breaks the link between instance and Node: the nomination
// does nothing, and the controller, which never sees the node register, terminates it after the
// register timeout.
//
// # IAM policy
//
// The autoscaler's role (IRSA or EKS Pod Identity; the SDK's default credential chain finds
// either) needs this policy. Replace the account and role in the PassRole statement with the
// role of the launch template's instance profile; in other partitions, arn:aws becomes
// arn:aws-cn or arn:aws-us-gov. A launch template whose volumes use a customer-managed KMS key
// also needs kms:CreateGrant and kms:GenerateDataKeyWithoutPlaintext on that key.
//
//	{
//	  "Version": "2012-10-17",
//	  "Statement": [
//	    {
//	      "Sid": "Launch",
//	      "Effect": "Allow",
//	      "Action": "ec2:RunInstances",
//	      "Resource": "*"
//	    },
//	    {
//	      "Sid": "TagOnLaunch",
//	      "Effect": "Allow",
//	      "Action": "ec2:CreateTags",
//	      "Resource": ["arn:aws:ec2:*:*:instance/*", "arn:aws:ec2:*:*:volume/*"],
//	      "Condition": {"StringEquals": {"ec2:CreateAction": "RunInstances"}}
//	    },
//	    {
//	      "Sid": "Describe",
//	      "Effect": "Allow",
//	      "Action": "ec2:DescribeInstances",
//	      "Resource": "*"
//	    },
//	    {
//	      "Sid": "TerminateOwn",
//	      "Effect": "Allow",
//	      "Action": "ec2:TerminateInstances",
//	      "Resource": "arn:aws:ec2:*:*:instance/*",
//	      "Condition": {"StringEquals": {"aws:ResourceTag/kube-neuron.io/launched-by": "neuron-autoscaler"}}
//	    },
//	    {
//	      "Sid": "RecordPlannedPods",
//	      "Effect": "Allow",
//	      "Action": ["ec2:CreateTags", "ec2:DeleteTags"],
//	      "Resource": "arn:aws:ec2:*:*:instance/*",
//	      "Condition": {
//	        "StringEquals": {"aws:ResourceTag/kube-neuron.io/launched-by": "neuron-autoscaler"},
//	        "ForAllValues:StringLike": {"aws:TagKeys": ["kube-neuron.io/planned-pods", "kube-neuron.io/planned-pods-*"]}
//	      }
//	    },
//	    {
//	      "Sid": "PassNodeRole",
//	      "Effect": "Allow",
//	      "Action": "iam:PassRole",
//	      "Resource": "arn:aws:iam::111122223333:role/<node role of the launch template's instance profile>",
//	      "Condition": {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}}
//	    }
//	  ]
//	}
//
// # Reserved capacity
//
// Options.CapacityReservations select On-Demand Capacity Reservations and Capacity Blocks for ML
// by id or by tags (reservations.go). Reservations describes them (DescribeCapacityReservations,
// states active and scheduled; DescribeCapacityBlocks for the UltraServer type of a block, which
// CapacityReservation does not carry). Launch with NodeRequest.Reservation targets the
// reservation (CapacityReservationSpecification, and the capacity-block market type for a
// block) in the configured subnets of its Availability Zone (DescribeSubnets, once), and tags the
// instance kube-neuron.io/capacity-type, kube-neuron.io/capacity-reservation-id and, for a
// block, kube-neuron.io/capacity-reservation-end; Instances reports them as labels and
// annotations, with the instance's CapacityBlockId as CapacityBlockIDAnnotation.
// LaunchUltraServer launches an UltraServer's nodes into its UltraServer Capacity Block, all or
// none. The IAM policy then also needs ec2:DescribeCapacityReservations,
// ec2:DescribeCapacityBlocks and ec2:DescribeSubnets (docs/autoscaler-eks.md, section 6).
//
// # Errors
//
// InsufficientInstanceCapacity and Unsupported move a launch to the next subnet (the client
// does not retry them in the same subnet, although EC2 answers the first with HTTP 500); when
// every subnet failed, Launch returns a *CapacityError with each subnet's EC2 message. An
// UnauthorizedOperation is a *PermissionError naming the IAM actions the call needs. A missing
// launch template or subnet and an exhausted vCPU quota say what to change.
//
// The tests run the real aws-sdk-go-v2 client against fakeec2, a fake endpoint that speaks the
// EC2 Query API for the actions used, because EC2 cannot run here.
package ec2
