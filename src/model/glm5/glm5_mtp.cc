// The MTP (NextN) draft layer, spec §5 (inferred): u = W_eh [enorm(emb(t+1)); hnorm(h)],
// one single-stream pre-norm block (MLA + indexer with its own cache, MoE), then
// the shared-head norm and the model's lm_head.
#include <string>

#include "model/glm5/glm5_model.h"

namespace tf {

Expected<Tensor> Glm5Model::mtp_step(Glm5Sequence& seq, const Tensor& hidden, std::span<const int32_t> next_tokens) {
  if (!weights_.mtp) return unimplemented("mtp_step: the checkpoint has no MTP layer (num_nextn_predict_layers = 0)");
  try {
    const MtpWeights& w = *weights_.mtp;
    const int64_t t = static_cast<int64_t>(next_tokens.size()), h = cfg_.hidden_size;
    const float eps = static_cast<float>(cfg_.rms_norm_eps);
    if (t == 0 || hidden.dim() != 2 || hidden.size(0) != t || hidden.size(1) != h)
      return invalid_argument("mtp_step: hidden " + hidden.describe() + " does not match " + std::to_string(t) +
                              " next tokens");
    for (int32_t id : next_tokens)
      if (id < 0 || id >= cfg_.vocab_size) return out_of_range("mtp_step: token id " + std::to_string(id));
    TF_RETURN_IF_ERROR(mtp_pool_->reserve(seq.mtp_pages_, seq.mtp_length_ + t));
    sync_page_table(seq.mtp_pages_, seq.mtp_pages_dev_);
    const std::vector<int32_t> ids(next_tokens.begin(), next_tokens.end());
    Tensor e = ops_.empty({t, h});
    ops_.embedding(e, weights_.embed, upload_i32(ids));
    const Tensor hc = on_device(hidden);
    // [enorm(e); hnorm(h)]: each half copied into its column block of `cat`.
    Tensor cat = ops_.empty({t, 2 * h});
    Tensor en = cat.slice(1, 0, h), hn = cat.slice(1, h, 2 * h);
    Tensor en_packed = ops_.empty({t, h}), hn_packed = ops_.empty({t, h});
    ops_.rms_norm(en_packed, e, w.enorm, eps);
    ops_.rms_norm(hn_packed, hc, w.hnorm, eps);
    ops_.copy(en, en_packed);
    ops_.copy(hn, hn_packed);
    Tensor u = ops_.empty({t, h});
    ops_.matmul(u, cat, w.eh_proj);
    std::vector<Span> spans{{&seq, 0, t, seq.mtp_length_}};
    std::vector<Tensor> shared(1);
    Tensor a = ops_.empty({t, h});
    ops_.rms_norm(a, u, w.block.input_norm, eps);
    Tensor y = mla_forward(w.block, 0, a, spans, shared, true);
    ops_.add(u, u, y);
    ops_.rms_norm(a, u, w.block.post_norm, eps);
    y = ffn_forward(w.block, a);
    ops_.add(u, u, y);
    ops_.rms_norm(a, u, w.shared_head_norm, eps);
    Tensor logits = to_host(logits_for(a));
    seq.mtp_length_ += t;
    return logits;
  } catch (const StatusError& err) {
    return err.status().with_context("glm5 mtp_step");
  }
}

}  // namespace tf
