/* train.init_from: a model's parameters and buffers from an npz or
 * safetensors file (report/weights.h) under the names `ctrain-dist export`
 * writes (report/export.h): the state_dict's, and a gpt's nanoGPT's. The way
 * in for weights trained elsewhere (PyTorch, or another of our runs).
 *
 * Strict, as load_state_dict(strict=True) is: every tensor of the model must
 * be in the file with the model's very shape, and the file may hold nothing
 * else (a gpt's lm_head.weight may be there, equal to transformer.wte.weight:
 * the head is tied). float32, float16 and bfloat16 are widened to float32;
 * a non-finite value is refused. Every refusal names the file and the
 * tensors; names and shapes are checked before a value is written (a
 * non-finite value is found while writing: the model is then part loaded,
 * and the caller ends the run).
 *
 *     rc = ct_init_from_load(&s->model, "gpt", "gpt2.safetensors");  // rank 0
 */
#ifndef CT_TRAIN_INIT_FROM_H
#define CT_TRAIN_INIT_FROM_H

struct ct_model;

/* model_name: the config's model.name ("gpt" reads nanoGPT's names). */
int ct_init_from_load(struct ct_model *m, const char *model_name, const char *path);

#endif
