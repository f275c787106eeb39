"""The networks: one file per paper, each readable next to it (equation numbers and tensor
shapes in the comments, explicit masks).

Every network subclasses ``models.base.Network``, the contract the rest of the platform relies
on (constructor arguments, batch inputs, optional hooks); its config is
``conf/model/<name>.yaml`` with ``net._target_`` naming the class.
"""
