"""Activities and pure rules of base model delivery (BaseModel, ClusterBaseModel, FineTunedWeight):
storage URIs, spec metadata from an import's inspection, the object's annotation and spec, the node
agents' reports, PVC checks and ModelPack tag resolution."""
