"""EAGLE-3 (Li et al. 2025) with a published or imported EAGLE-3 head (`specbench heads import`).

Drafting is EAGLE-2's (methods/heads/eagle/method.py: the dynamic tree of BC - 1 nodes, or a
static tree with `-o eagle3.tree=`); what changes is the head (methods/heads/eagle3/model.py): it
reads the target's hidden states at the inputs of three layers (2, L//2, L-3 by default), which
the engine hands over from the same verification forward (`Drafter.hidden_layers`, every forward
path including `lean`), and its own logits over a draft vocabulary mapped to target ids through
`d2t`.
The target verifies every drafted token: lossless.
"""

from __future__ import annotations

from specbench_cli.methods.heads.eagle.method import Eagle, EagleOptions


class Eagle3(Eagle):
    name = "eagle3"
    kind = "eagle3"
    summary = "EAGLE-3 head (-o eagle3.heads=DIR): three target layers' features, own draft vocabulary, EAGLE-2 tree"
    Options = EagleOptions
    needs = Eagle.needs + ("layer_features",)

    def setup(self) -> None:
        super().setup()
        self.hidden_layers = tuple(self.head.feature_layers(int(self.ctx.target.config.num_hidden_layers)))
