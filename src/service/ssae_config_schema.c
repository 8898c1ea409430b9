/* The config file's schema (libcyaml). Every key below is documented in
 * tools/ssae.example.yaml. Thread context: read-only data. */
#include "ssae_config_schema.h"

#define OPT (CYAML_FLAG_POINTER | CYAML_FLAG_OPTIONAL)
#define STR(key, type, member) \
  CYAML_FIELD_STRING_PTR(key, OPT, type, member, 1, CYAML_UNLIMITED)

static const cyaml_schema_field_t hyst_fields[] = {
    CYAML_FIELD_INT_PTR("on", OPT, cfg_hyst, on),
    CYAML_FIELD_INT_PTR("off", OPT, cfg_hyst, off),
    CYAML_FIELD_END};

static const cyaml_schema_field_t machine_fields[] = {
    CYAML_FIELD_STRING_PTR("name", CYAML_FLAG_POINTER, cfg_machine, name, 1,
                           CYAML_UNLIMITED),
    STR("model", cfg_machine, model),
    CYAML_FIELD_FLOAT_PTR("threshold", OPT, cfg_machine, threshold),
    CYAML_FIELD_FLOAT_PTR("smoothing", OPT, cfg_machine, smoothing),
    CYAML_FIELD_MAPPING_PTR("hysteresis", OPT, cfg_machine, hysteresis,
                            hyst_fields),
    CYAML_FIELD_END};

static const cyaml_schema_value_t machine_entry = {
    CYAML_VALUE_MAPPING(CYAML_FLAG_DEFAULT, cfg_machine, machine_fields)};

static const cyaml_schema_field_t engine_fields[] = {
    STR("backend", cfg_engine, backend),
    CYAML_FIELD_INT_PTR("gpu", OPT, cfg_engine, gpu),
    CYAML_FIELD_FLOAT_PTR("status_every", OPT, cfg_engine, status_every),
    CYAML_FIELD_END};

static const cyaml_schema_value_t int_entry = {
    CYAML_VALUE_INT(CYAML_FLAG_DEFAULT, int)};
static const cyaml_schema_value_t string_entry = {
    CYAML_VALUE_STRING(CYAML_FLAG_POINTER, char, 1, CYAML_UNLIMITED)};

static const cyaml_schema_field_t portaudio_fields[] = {
    STR("device", cfg_portaudio, device),
    CYAML_FIELD_SEQUENCE("channels", OPT, cfg_portaudio, channels, &int_entry,
                         1, 4096),
    CYAML_FIELD_END};

static const cyaml_schema_field_t jack_fields[] = {
    CYAML_FIELD_SEQUENCE("ports", CYAML_FLAG_POINTER, cfg_jack, ports,
                         &string_entry, 1, 4096),
    CYAML_FIELD_END};

static const cyaml_schema_field_t file_fields[] = {
    CYAML_FIELD_STRING_PTR("path", CYAML_FLAG_POINTER, cfg_file, path, 1,
                           CYAML_UNLIMITED),
    CYAML_FIELD_BOOL_PTR("realtime", OPT, cfg_file, realtime),
    CYAML_FIELD_END};

static const cyaml_schema_field_t input_fields[] = {
    CYAML_FIELD_MAPPING_PTR("portaudio", OPT, cfg_input, portaudio,
                            portaudio_fields),
    CYAML_FIELD_MAPPING_PTR("jack", OPT, cfg_input, jack, jack_fields),
    CYAML_FIELD_MAPPING_PTR("file", OPT, cfg_input, file, file_fields),
    CYAML_FIELD_END};

static const cyaml_schema_field_t tls_fields[] = {
    STR("ca_file", cfg_tls, ca_file),
    STR("cert_file", cfg_tls, cert_file),
    STR("key_file", cfg_tls, key_file),
    CYAML_FIELD_BOOL_PTR("insecure", OPT, cfg_tls, insecure),
    CYAML_FIELD_END};

static const cyaml_schema_field_t hass_fields[] = {
    CYAML_FIELD_BOOL_PTR("discovery", OPT, cfg_hass, discovery),
    STR("prefix", cfg_hass, prefix),
    CYAML_FIELD_END};

static const cyaml_schema_field_t mqtt_fields[] = {
    CYAML_FIELD_STRING_PTR("url", CYAML_FLAG_POINTER, cfg_mqtt, url, 1,
                           CYAML_UNLIMITED),
    STR("prefix", cfg_mqtt, prefix),
    STR("client_id", cfg_mqtt, client_id),
    STR("username", cfg_mqtt, username),
    STR("password_env", cfg_mqtt, password_env),
    STR("password_file", cfg_mqtt, password_file),
    CYAML_FIELD_MAPPING_PTR("tls", OPT, cfg_mqtt, tls, tls_fields),
    CYAML_FIELD_MAPPING_PTR("homeassistant", OPT, cfg_mqtt, homeassistant,
                            hass_fields),
    CYAML_FIELD_INT_PTR("queue", OPT, cfg_mqtt, queue),
    CYAML_FIELD_INT_PTR("keepalive", OPT, cfg_mqtt, keepalive),
    CYAML_FIELD_FLOAT_PTR("reconnect_min", OPT, cfg_mqtt, reconnect_min),
    CYAML_FIELD_FLOAT_PTR("reconnect_max", OPT, cfg_mqtt, reconnect_max),
    CYAML_FIELD_END};

static const cyaml_schema_field_t metrics_fields[] = {
    CYAML_FIELD_STRING_PTR("listen", CYAML_FLAG_POINTER, cfg_metrics, listen,
                           1, CYAML_UNLIMITED),
    CYAML_FIELD_END};

static const cyaml_schema_field_t keep_fields[] = {
    CYAML_FIELD_INT_PTR("count", OPT, cfg_keep, count),
    CYAML_FIELD_FLOAT_PTR("age_days", OPT, cfg_keep, age_days),
    CYAML_FIELD_FLOAT_PTR("size_mb", OPT, cfg_keep, size_mb),
    CYAML_FIELD_END};

static const cyaml_strval_t clip_formats[] = {
    {"flac", CFG_CLIP_FLAC},
    {"wav", CFG_CLIP_WAV},
};

static const cyaml_schema_field_t clips_fields[] = {
    CYAML_FIELD_STRING_PTR("dir", CYAML_FLAG_POINTER, cfg_clips, dir, 1,
                           CYAML_UNLIMITED),
    CYAML_FIELD_ENUM_PTR("format", OPT, cfg_clips, format, clip_formats, 2),
    CYAML_FIELD_FLOAT_PTR("pre_roll", OPT, cfg_clips, pre_roll),
    CYAML_FIELD_FLOAT_PTR("post_roll", OPT, cfg_clips, post_roll),
    CYAML_FIELD_FLOAT_PTR("max_length", OPT, cfg_clips, max_length),
    CYAML_FIELD_MAPPING_PTR("keep", OPT, cfg_clips, keep, keep_fields),
    CYAML_FIELD_BOOL_PTR("picture", OPT, cfg_clips, picture),
    CYAML_FIELD_END};

static const cyaml_schema_field_t outputs_fields[] = {
    STR("events", cfg_outputs, events),
    CYAML_FIELD_MAPPING_PTR("mqtt", OPT, cfg_outputs, mqtt, mqtt_fields),
    CYAML_FIELD_MAPPING_PTR("metrics", OPT, cfg_outputs, metrics,
                            metrics_fields),
    CYAML_FIELD_MAPPING_PTR("clips", OPT, cfg_outputs, clips, clips_fields),
    CYAML_FIELD_END};

static const cyaml_schema_field_t top_fields[] = {
    STR("node", cfg_top, node),
    CYAML_FIELD_MAPPING_PTR("engine", OPT, cfg_top, engine, engine_fields),
    CYAML_FIELD_SEQUENCE("machines", OPT, cfg_top, machines, &machine_entry,
                         1, 4096),
    CYAML_FIELD_MAPPING_PTR("input", OPT, cfg_top, input, input_fields),
    CYAML_FIELD_MAPPING_PTR("outputs", OPT, cfg_top, outputs, outputs_fields),
    CYAML_FIELD_END};

const cyaml_schema_value_t ssae_config_schema = {
    CYAML_VALUE_MAPPING(CYAML_FLAG_POINTER, cfg_top, top_fields)};
