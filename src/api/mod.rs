//! The Karpenter v1 API types (NodePool, NodeClaim, EC2NodeClass), their
//! defaults, and the CustomResourceDefinitions and JSON Schemas generated
//! from them.
