//! The IAM actions dovetail's AWS code needs, in one list.
//!
//! `deploy/iam-policy.json` must allow each of them; `tests/aws.rs` checks
//! that, and that every AWS SDK operation called anywhere under `src/`
//! (`ec2.describe_instances()`, `ssm.get_parameters()`, `sqs....`,
//! `pricing....`, `iam....`, `eks....`: clients are named after their service) and every action
//! named to [`super::error::call`] is listed here. Adding a call therefore
//! means adding its action here and to the policy, or the test fails.

/// Actions the code calls.
pub const ACTIONS: &[&str] = &[
    "ec2:CreateFleet",
    "ec2:CreateLaunchTemplate",
    "ec2:CreateTags",
    "ec2:DeleteLaunchTemplate",
    "ec2:DescribeCapacityReservations",
    "ec2:DescribeImages",
    "ec2:DescribeInstanceTypeOfferings",
    "ec2:DescribeInstanceTypes",
    "ec2:DescribeInstances",
    "ec2:DescribeLaunchTemplates",
    "ec2:DescribePlacementGroups",
    "ec2:DescribeSecurityGroups",
    "ec2:DescribeSpotPriceHistory",
    "ec2:DescribeSubnets",
    "ec2:RunInstances",
    "ec2:TerminateInstances",
    "eks:DescribeCluster",
    "iam:AddRoleToInstanceProfile",
    "iam:CreateInstanceProfile",
    "iam:DeleteInstanceProfile",
    "iam:GetInstanceProfile",
    "iam:ListInstanceProfiles",
    "iam:RemoveRoleFromInstanceProfile",
    "pricing:GetProducts",
    "sqs:DeleteMessage",
    "sqs:GetQueueUrl",
    "sqs:ReceiveMessage",
    "ssm:GetParameters",
];

/// Actions EC2 checks on the caller's behalf without the code naming them,
/// and why.
pub const IMPLIED_ACTIONS: &[(&str, &str)] = &[
    (
        "iam:PassRole",
        "launch templates give instances the node role's instance profile, and the role is added to instance profiles",
    ),
    (
        "iam:TagInstanceProfile",
        "instance profiles are created with their tags",
    ),
];
