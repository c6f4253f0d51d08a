module.exports = require('@backstage/cli/config/eslint-factory')(__dirname, {
  rules: {
    // openapi-fetch's methods are named after HTTP verbs: client.GET(...).
    'new-cap': ['error', { capIsNew: false }],
  },
});
